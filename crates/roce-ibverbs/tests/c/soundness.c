/* The library's memory-safety and error-reporting contracts, one scenario
 * per run (argv[1]), each in its own process so that a crash in one is
 * that scenario's failure alone. Built against rdma-core's header and
 * linked against its libibverbs; the test preloads roce's library over it
 * (and runs it under valgrind where valgrind exists).
 *
 *   cq-teardown   destroying a CQ takes its undelivered completion events
 *                 off the channel: its fd no longer polls readable, and a
 *                 later ibv_get_cq_event finds none (EAGAIN on a
 *                 non-blocking fd), never the freed CQ
 *                 (rdma-core: the kernel drops the CQ's queued events in
 *                 ib_uverbs_release_ucq; ibv_cmd_destroy_cq waits only for
 *                 the events already reported to be acknowledged).
 *   two-contexts  two contexts of one device: an async event reaches the
 *                 context that owns its QP, not whichever context drains
 *                 the device first.
 *   chain-errno   a chained ibv_post_send whose posting of the WRs before
 *                 a malformed one fails returns that failure's errno
 *                 (ENOMEM for a full send queue) and names that WR.
 *   sge-bound     a num_sge beyond the device's max_sge is refused with
 *                 EINVAL before anything is read or allocated.
 *
 * Prints "ok" and exits 0, or says what failed and exits 1. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAILED line %d: %s: ", __LINE__, #c); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, " (errno %d)\n", errno); exit(1); } } while (0)

static char buf[8192] __attribute__((aligned(4096)));

struct pair {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_mr *mr;
    struct ibv_comp_channel *ch;
    struct ibv_cq *cq, *cq2;
    struct ibv_qp *a, *b;
};

static struct ibv_context *open_dev(void)
{
    int n = -1;
    struct ibv_device **list = ibv_get_device_list(&n);
    CHECK(list && n == 1, "%d devices", n);
    struct ibv_context *ctx = ibv_open_device(list[0]);
    CHECK(ctx, "open");
    ibv_free_device_list(list);
    return ctx;
}

static void to_rts(struct ibv_qp *qp, uint32_t dest, union ibv_gid gid)
{
    struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
        .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE };
    CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0, "INIT");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = dest; a.rq_psn = 7;
    a.max_dest_rd_atomic = 1; a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1; a.ah_attr.grh.dgid = gid; a.ah_attr.grh.hop_limit = 1; a.ah_attr.port_num = 1;
    CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
          IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0, "RTR");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS; a.timeout = 14; a.retry_cnt = 7; a.rnr_retry = 7; a.sq_psn = 7; a.max_rd_atomic = 1;
    CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0, "RTS");
}

/* Two connected RC QPs of `ctx`: a completes on cq (with a non-blocking
 * channel), b on cq2; b's send queue holds `b_send_wr` WRs. */
static struct pair make_pair(struct ibv_context *ctx, uint32_t b_send_wr)
{
    struct pair p = { .ctx = ctx };
    union ibv_gid gid;
    CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "gid");
    p.pd = ibv_alloc_pd(ctx);
    CHECK(p.pd, "pd");
    p.mr = ibv_reg_mr(p.pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    CHECK(p.mr, "mr");
    p.ch = ibv_create_comp_channel(ctx);
    CHECK(p.ch, "channel");
    CHECK(fcntl(p.ch->fd, F_SETFL, fcntl(p.ch->fd, F_GETFL) | O_NONBLOCK) == 0, "O_NONBLOCK");
    p.cq = ibv_create_cq(ctx, 16, NULL, p.ch, 0);
    p.cq2 = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    CHECK(p.cq && p.cq2, "cqs");
    struct ibv_qp_init_attr ia = { .send_cq = p.cq, .recv_cq = p.cq, .qp_type = IBV_QPT_RC,
        .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
    p.a = ibv_create_qp(p.pd, &ia);
    ia.send_cq = p.cq2; ia.recv_cq = p.cq2; ia.cap.max_send_wr = b_send_wr;
    p.b = ibv_create_qp(p.pd, &ia);
    CHECK(p.a && p.b, "qps");
    to_rts(p.a, p.b->qp_num, gid);
    to_rts(p.b, p.a->qp_num, gid);
    return p;
}

static void teardown(struct pair *p)
{
    if (p->a)
        CHECK(ibv_destroy_qp(p->a) == 0, "destroy a");
    CHECK(ibv_destroy_qp(p->b) == 0, "destroy b");
    if (p->cq)
        CHECK(ibv_destroy_cq(p->cq) == 0, "destroy cq");
    CHECK(ibv_destroy_cq(p->cq2) == 0, "destroy cq2");
    CHECK(ibv_destroy_comp_channel(p->ch) == 0, "destroy channel");
    CHECK(ibv_dereg_mr(p->mr) == 0 && ibv_dealloc_pd(p->pd) == 0, "dereg, dealloc");
}

/* b sends to a; a's receive completes on cq. */
static void send_b_to_a(struct pair *p)
{
    struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 16, .lkey = p->mr->lkey };
    struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &s, .num_sge = 1 }, *bad_r;
    CHECK(ibv_post_recv(p->a, &rwr, &bad_r) == 0, "post_recv");
    struct ibv_send_wr swr = { .wr_id = 2, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
        .send_flags = IBV_SEND_SIGNALED }, *bad_s;
    CHECK(ibv_post_send(p->b, &swr, &bad_s) == 0, "post_send");
}

static void cq_teardown(void)
{
    struct ibv_context *ctx = open_dev();
    struct pair p = make_pair(ctx, 4);
    CHECK(ibv_req_notify_cq(p.cq, 0) == 0, "arm");
    send_b_to_a(&p);
    struct pollfd pfd = { .fd = p.ch->fd, .events = POLLIN };
    CHECK(poll(&pfd, 1, 30000) == 1, "an event is queued on the channel");
    /* The event is queued, never taken: the CQ may go, and its event with it. */
    CHECK(ibv_destroy_qp(p.a) == 0, "destroy a");
    p.a = NULL;
    CHECK(ibv_destroy_cq(p.cq) == 0, "destroy the CQ with an undelivered event");
    p.cq = NULL;
    CHECK(poll(&pfd, 1, 0) == 0, "the channel's fd still polls readable with no event left");
    struct ibv_cq *ev_cq = NULL;
    void *ev_ctx;
    errno = 0;
    int r = ibv_get_cq_event(p.ch, &ev_cq, &ev_ctx);
    CHECK(r == -1 && errno == EAGAIN, "ibv_get_cq_event after the CQ's destruction returned %d, cq %p", r,
          (void *)ev_cq);
    teardown(&p);
    CHECK(ibv_close_device(ctx) == 0, "close");
}

static void two_contexts(void)
{
    struct ibv_context *first = open_dev();
    struct ibv_context *second = open_dev();
    struct pair p = make_pair(second, 4);
    /* An RDMA WRITE with a wrong rkey: a's side raises an access error. */
    struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 8, .lkey = p.mr->lkey };
    struct ibv_send_wr w = { .wr_id = 3, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
        .send_flags = IBV_SEND_SIGNALED, .wr.rdma = { .remote_addr = (uintptr_t)buf, .rkey = p.mr->rkey ^ 0x5a5a } },
        *bad;
    CHECK(ibv_post_send(p.b, &w, &bad) == 0, "post bad write");
    struct ibv_wc wc;
    while (ibv_poll_cq(p.cq2, 1, &wc) == 0)
        ;
    CHECK(wc.status == IBV_WC_REM_ACCESS_ERR, "write wc %s", ibv_wc_status_str(wc.status));
    struct pollfd pfd = { .fd = second->async_fd, .events = POLLIN };
    CHECK(poll(&pfd, 1, 30000) == 1, "the owning context's async fd became readable");
    struct ibv_async_event ae;
    CHECK(ibv_get_async_event(second, &ae) == 0, "get_async_event");
    CHECK(ae.element.qp == p.a || ae.element.qp == p.b, "the event names one of the QPs");
    ibv_ack_async_event(&ae);
    struct pollfd other = { .fd = first->async_fd, .events = POLLIN };
    CHECK(poll(&other, 1, 0) == 0, "the other context got an event for no object of its own");
    teardown(&p);
    CHECK(ibv_close_device(second) == 0 && ibv_close_device(first) == 0, "close");
}

static void chain_errno(void)
{
    struct ibv_context *ctx = open_dev();
    struct pair p = make_pair(ctx, 1);
    struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 16, .lkey = p.mr->lkey };
    struct ibv_send_wr w[3], *bad = NULL;
    memset(w, 0, sizeof w);
    for (int i = 0; i < 3; i++) {
        w[i].wr_id = i; w[i].sg_list = &s; w[i].num_sge = 1; w[i].opcode = IBV_WR_SEND;
        w[i].next = i < 2 ? &w[i + 1] : NULL;
    }
    w[2].opcode = 77;
    /* A send queue of one WR: the second is refused as the queue is full,
     * before the malformed third is reached. */
    int r = ibv_post_send(p.b, w, &bad);
    CHECK(r == ENOMEM && bad == &w[1], "post_send returned %d (%s), bad_wr is WR %ld", r, strerror(r),
          bad ? (long)(bad - w) : -1L);
    teardown(&p);
    CHECK(ibv_close_device(ctx) == 0, "close");
}

static void sge_bound(void)
{
    struct ibv_context *ctx = open_dev();
    struct pair p = make_pair(ctx, 4);
    struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 16, .lkey = p.mr->lkey };
    struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &s, .num_sge = INT_MAX }, *bad_r = NULL;
    CHECK(ibv_post_recv(p.a, &rwr, &bad_r) == EINVAL && bad_r == &rwr, "post_recv with num_sge INT_MAX");
    struct ibv_send_wr swr = { .wr_id = 2, .sg_list = &s, .num_sge = INT_MAX, .opcode = IBV_WR_SEND }, *bad_s = NULL;
    CHECK(ibv_post_send(p.b, &swr, &bad_s) == EINVAL && bad_s == &swr, "post_send with num_sge INT_MAX");
    teardown(&p);
    CHECK(ibv_close_device(ctx) == 0, "close");
}

int main(int argc, char **argv)
{
    CHECK(argc == 2, "usage: soundness SCENARIO");
    if (!strcmp(argv[1], "cq-teardown"))
        cq_teardown();
    else if (!strcmp(argv[1], "two-contexts"))
        two_contexts();
    else if (!strcmp(argv[1], "chain-errno"))
        chain_errno();
    else if (!strcmp(argv[1], "sge-bound"))
        sge_bound();
    else
        CHECK(0, "unknown scenario %s", argv[1]);
    printf("ok\n");
    return 0;
}
