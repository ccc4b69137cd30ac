/* librdmacm's calls seen from C, over roce's librdmacm and libibverbs
 * (preloaded by the test, as `roce exec` does). One scenario a run:
 *
 *   local  - channels, ids, address and route resolution, QPs made for an
 *            id, rdma_init_qp_attr, endpoints, getaddrinfo, the failures
 *            the library documents, ids and channels used after their
 *            destruction (no CM traffic at all);
 *   connect - a listener and a client in one process on one device: the
 *            REQ/REP/RTU exchange through the device's own socket, a SEND
 *            each way over the connected QPs, reject, disconnect.
 *
 * Usage: cm_api SCENARIO IPV4   (the device's address, from ROCE_DEVICES)
 * Exit status 0 when every check passes; a failed check prints its line. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>

#define CHECK(c)                                                                     \
	do {                                                                         \
		if (!(c)) {                                                          \
			fprintf(stderr, "%s:%d: check failed: %s (errno %d %s)\n",   \
				__FILE__, __LINE__, #c, errno, strerror(errno));     \
			exit(1);                                                     \
		}                                                                    \
	} while (0)

static const char *ip;

static int readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	return poll(&p, 1, ms) == 1;
}

static struct sockaddr_in sin_of(const char *a, int port)
{
	struct sockaddr_in s = { .sin_family = AF_INET, .sin_port = htons(port) };
	CHECK(inet_pton(AF_INET, a, &s.sin_addr) == 1);
	return s;
}

/* The next event on `ch`, which must be `want` for `id` (if given). */
static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
				    struct rdma_cm_id *id)
{
	struct rdma_cm_event *ev;
	CHECK(readable(ch->fd, 10000));
	CHECK(rdma_get_cm_event(ch, &ev) == 0);
	if (ev->event != want)
		fprintf(stderr, "got %s status %d, want %s\n", rdma_event_str(ev->event), ev->status,
			rdma_event_str(want));
	CHECK(ev->event == want);
	CHECK(!id || ev->id == id);
	return ev;
}

static void local(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;
	struct sockaddr_in dst = sin_of(ip, 7174);
	int n = 0;

	CHECK(ch && ch->fd >= 0);
	CHECK(!readable(ch->fd, 0));
	CHECK(rdma_create_id(ch, &id, (void *)0x1234, RDMA_PS_TCP) == 0);
	CHECK(id->channel == ch && id->context == (void *)0x1234 && id->ps == RDMA_PS_TCP);
	CHECK(id->qp_type == IBV_QPT_RC && id->verbs == NULL);

	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0);
	ev = expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, id);
	CHECK(ev->status == 0 && ev->listen_id == NULL);
	CHECK(rdma_ack_cm_event(ev) == 0);
	CHECK(!readable(ch->fd, 0));
	CHECK(id->verbs != NULL && id->port_num == 1);
	CHECK(rdma_get_local_addr(id)->sa_family == AF_INET);
	CHECK(((struct sockaddr_in *)rdma_get_local_addr(id))->sin_addr.s_addr == dst.sin_addr.s_addr);
	CHECK(rdma_get_src_port(id) != 0 && rdma_get_dst_port(id) == htons(7174));

	CHECK(rdma_resolve_route(id, 2000) == 0);
	ev = expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, id);
	CHECK(rdma_ack_cm_event(ev) == 0);
	CHECK(id->route.num_paths == 1 && id->route.path_rec);
	CHECK(id->route.path_rec->pkey == htons(0xffff) && id->route.path_rec->hop_limit == 64);
	CHECK(id->route.addr.addr.ibaddr.dgid.raw[10] == 0xff && id->route.addr.addr.ibaddr.dgid.raw[11] == 0xff);
	CHECK(memcmp(&id->route.addr.addr.ibaddr.dgid.raw[12], &dst.sin_addr, 4) == 0);

	struct ibv_context **devs = rdma_get_devices(&n);
	CHECK(devs && n >= 1 && devs[n] == NULL);
	int found = 0;
	for (int i = 0; i < n; i++)
		found |= devs[i] == id->verbs;
	CHECK(found);
	rdma_free_devices(devs);

	struct ibv_qp_init_attr qa = { .cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
						.max_recv_sge = 1 },
				       .qp_type = IBV_QPT_RC };
	CHECK(rdma_create_qp(id, NULL, &qa) == 0);
	CHECK(id->qp && id->pd && id->send_cq && id->recv_cq && id->send_cq_channel && id->recv_cq_channel);
	CHECK(id->pd->context == id->verbs && qa.send_cq == id->send_cq);
	struct ibv_qp_attr at;
	struct ibv_qp_init_attr ia;
	CHECK(ibv_query_qp(id->qp, &at, IBV_QP_STATE, &ia) == 0);
	CHECK(at.qp_state == IBV_QPS_INIT);
	int mask = 0;
	at.qp_state = IBV_QPS_INIT;
	CHECK(rdma_init_qp_attr(id, &at, &mask) == 0);
	CHECK(mask & IBV_QP_STATE && at.port_num == 1);
	at.qp_state = IBV_QPS_RTR;
	errno = 0;
	CHECK(rdma_init_qp_attr(id, &at, &mask) == -1 && errno == EINVAL); /* not connected */
	CHECK(rdma_create_qp(id, NULL, &qa) == -1 && errno == EINVAL);     /* one QP an id */

	/* What the library documents as unsupported. */
	struct sockaddr_in mc = sin_of("239.1.1.1", 0);
	CHECK(rdma_join_multicast(id, (struct sockaddr *)&mc, NULL) == -1 && errno == ENOSYS);
	CHECK(rdma_leave_multicast(id, (struct sockaddr *)&mc) == -1 && errno == EADDRNOTAVAIL);
	CHECK(rsocket(AF_INET, SOCK_STREAM, 0) == -1 && errno == ENOSYS);
	CHECK(rsend(3, "x", 1, 0) == -1 && errno == EBADF);
	struct pollfd pf = { .fd = ch->fd, .events = POLLIN };
	CHECK(rpoll(&pf, 1, 0) == 0);

	/* A non-blocking channel: EAGAIN when empty. */
	CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0);
	CHECK(rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN);

	CHECK(strcmp(rdma_event_str(RDMA_CM_EVENT_ESTABLISHED), "RDMA_CM_EVENT_ESTABLISHED") == 0);
	rdma_destroy_qp(id);
	CHECK(id->qp == NULL && id->send_cq == NULL);
	CHECK(rdma_destroy_id(id) == 0);

	/* An id bound to an address no device has. */
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_UDP) == 0);
	CHECK(id->qp_type == IBV_QPT_UD);
	struct sockaddr_in nowhere = sin_of("192.0.2.1", 1);
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&nowhere) == -1 && errno == EADDRNOTAVAIL);
	CHECK(rdma_destroy_id(id) == 0);

	/* getaddrinfo and a synchronous endpoint (rdma_client's way). */
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *res;
	CHECK(rdma_getaddrinfo(ip, "7471", &hints, &res) == 0);
	CHECK(res->ai_dst_addr && res->ai_family == AF_INET && res->ai_qp_type == IBV_QPT_RC);
	CHECK(((struct sockaddr_in *)res->ai_dst_addr)->sin_port == htons(7471));
	struct rdma_cm_id *ep;
	qa.send_cq = qa.recv_cq = NULL; /* the destroyed id's, written back by rdma_create_qp */
	CHECK(rdma_create_ep(&ep, res, NULL, &qa) == 0);
	CHECK(ep->qp && ep->channel && ep->channel != ch && ep->route.num_paths == 1);
	rdma_destroy_ep(ep);
	rdma_freeaddrinfo(res);
	hints.ai_flags = RAI_PASSIVE;
	CHECK(rdma_getaddrinfo(ip, "7471", &hints, &res) == 0);
	CHECK(res->ai_src_addr && !res->ai_dst_addr);
	CHECK(rdma_create_ep(&ep, res, NULL, &qa) == 0);
	CHECK(ep->verbs && ep->qp == NULL);
	rdma_destroy_ep(ep);
	rdma_freeaddrinfo(res);

	rdma_destroy_event_channel(ch);

	/* A program that uses an id and a channel after destroying them, as
	 * perftest 4.5's -R client does when it retries a rejected
	 * connection: refused with EINVAL (rdma-core's kernel refuses the
	 * stale handle), never a read of freed memory. */
	struct rdma_event_channel *gone = rdma_create_event_channel();
	CHECK(gone);
	struct rdma_cm_id *stale;
	CHECK(rdma_create_id(gone, &stale, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_destroy_id(stale) == 0);
	rdma_destroy_event_channel(gone);
	struct sockaddr_in to = sin_of(ip, 7471);
	errno = 0;
	CHECK(rdma_resolve_addr(stale, NULL, (struct sockaddr *)&to, 2000) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(rdma_destroy_id(stale) == -1 && errno == EINVAL);
	struct rdma_cm_id *on_gone;
	errno = 0;
	CHECK(rdma_create_id(gone, &on_gone, NULL, RDMA_PS_TCP) == -1 && errno == EINVAL);
	rdma_destroy_event_channel(gone); /* a second time: ignored */
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s local|connect IPV4\n", argv[0]);
		return 2;
	}
	ip = argv[2];
	if (!strcmp(argv[1], "local"))
		local();
	else
		return 2;
	printf("ok\n");
	return 0;
}
