/* Exercises roce's libibverbs through rdma-core's header, in one process:
 * device discovery, port and GID queries, a completion channel's file
 * descriptor with poll(2), the async event fd with epoll(7), inline sends
 * of unregistered memory, and the errno conventions programs check.
 * Two RC QPs of one device are connected to each other.
 * Prints "ok" and exits 0, or says what failed and exits 1. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <infiniband/verbs.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAILED line %d: %s: ", __LINE__, #c); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, " (errno %d)\n", errno); exit(1); } } while (0)

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
    CHECK(qp->state == IBV_QPS_RTS, "qp->state %d", qp->state);
}

int main(void)
{
    int n = -1;
    struct ibv_device **list = ibv_get_device_list(&n);
    CHECK(list && n == 1 && list[1] == NULL, "%d devices", n);
    CHECK(strcmp(ibv_get_device_name(list[0]), "roce0") == 0, "name %s", ibv_get_device_name(list[0]));
    struct ibv_context *ctx = ibv_open_device(list[0]);
    CHECK(ctx, "open");
    ibv_free_device_list(list);
    CHECK(ibv_fork_init() == 0, "fork_init");

    struct ibv_device_attr da;
    CHECK(ibv_query_device(ctx, &da) == 0 && da.phys_port_cnt == 1 && da.atomic_cap == IBV_ATOMIC_HCA, "device");
    struct ibv_port_attr pa;
    CHECK(ibv_query_port(ctx, 1, &pa) == 0, "port");
    CHECK(pa.state == IBV_PORT_ACTIVE && pa.link_layer == IBV_LINK_LAYER_ETHERNET && pa.active_mtu == IBV_MTU_4096,
          "port state %d link %d mtu %d", pa.state, pa.link_layer, pa.active_mtu);
    CHECK(ibv_query_port(ctx, 2, &pa) == EINVAL, "port 2");
    union ibv_gid gid;
    CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0 && gid.raw[10] == 0xff && gid.raw[11] == 0xff && gid.raw[12] == 127,
          "gid");
    struct ibv_gid_entry ge;
    CHECK(ibv_query_gid_ex(ctx, 1, 0, &ge, 0) == 0 && ge.gid_type == IBV_GID_TYPE_ROCE_V2, "gid type");
    CHECK(ibv_query_gid_ex(ctx, 1, 1, &ge, 0) == ENODATA, "gid 1");

    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    CHECK(pd, "pd");
    errno = 0;
    CHECK(ibv_reg_mr(pd, NULL, 64, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL, "NULL MR");
    static char buf[8192] __attribute__((aligned(4096)));
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf,
        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    CHECK(mr && mr->addr == buf && mr->length == sizeof buf, "mr");
    CHECK(ibv_dealloc_pd(pd) == EBUSY, "dealloc a PD in use");

    struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
    CHECK(ch && ch->fd >= 0, "channel");
    CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0, "O_NONBLOCK");
    struct ibv_cq *cq = ibv_create_cq(ctx, 64, (void *)0x1234, ch, 0);
    CHECK(cq && cq->channel == ch && cq->cqe >= 64, "cq");
    CHECK(ibv_destroy_comp_channel(ch) == EBUSY, "destroy a channel in use");
    struct ibv_cq *cq2 = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    CHECK(cq2, "cq2");

    struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq,
        .cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2, .max_recv_sge = 1, .max_inline_data = 64 },
        .qp_type = 99 };
    errno = 0;
    CHECK(ibv_create_qp(pd, &ia) == NULL && errno == EOPNOTSUPP, "QP type 99");
    ia.qp_type = IBV_QPT_RC;
    struct ibv_qp *a = ibv_create_qp(pd, &ia);
    ia.send_cq = cq2; ia.recv_cq = cq2;
    struct ibv_qp *b = ibv_create_qp(pd, &ia);
    CHECK(a && b && a->qp_num != b->qp_num && a->state == IBV_QPS_RESET, "qps");
    to_rts(a, b->qp_num, gid);
    to_rts(b, a->qp_num, gid);
    struct ibv_qp_attr qa; struct ibv_qp_init_attr qi;
    CHECK(ibv_query_qp(a, &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_RTS && qa.dest_qp_num == b->qp_num &&
          qi.send_cq == cq, "query_qp");

    /* Nothing yet: the channel's fd is not readable. */
    struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
    CHECK(ibv_req_notify_cq(cq, 0) == 0, "arm");
    CHECK(poll(&pfd, 1, 0) == 0, "readable before any completion");

    /* b sends to a, inline from memory no MR covers; a's receive completes on cq. */
    struct ibv_sge rsge = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
    struct ibv_recv_wr rwr = { .wr_id = 11, .sg_list = &rsge, .num_sge = 1 }, *bad_r;
    CHECK(ibv_post_recv(a, &rwr, &bad_r) == 0, "post_recv");
    static const char hello[] = "hello, verbs";
    struct ibv_sge ssge = { .addr = (uintptr_t)hello, .length = sizeof hello, .lkey = 0 };
    struct ibv_send_wr swr = { .wr_id = 22, .sg_list = &ssge, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM,
        .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE, .imm_data = htobe32(0xabcd) }, *bad_s = NULL;
    CHECK(ibv_post_send(b, &swr, &bad_s) == 0, "post_send inline");

    CHECK(poll(&pfd, 1, 10000) == 1 && (pfd.revents & POLLIN), "the channel's fd became readable");
    struct ibv_cq *ev_cq; void *ev_ctx;
    CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == cq && ev_ctx == (void *)0x1234, "get_cq_event");
    ibv_ack_cq_events(cq, 1);
    errno = 0;
    CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == -1 && errno == EAGAIN, "one event per arming");
    struct ibv_wc wc;
    CHECK(ibv_poll_cq(cq, 1, &wc) == 1, "poll");
    CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 11 && wc.opcode == IBV_WC_RECV && wc.byte_len == sizeof hello &&
          (wc.wc_flags & IBV_WC_WITH_IMM) && be32toh(wc.imm_data) == 0xabcd && wc.qp_num == a->qp_num,
          "recv wc status %d wr_id %llu", wc.status, (unsigned long long)wc.wr_id);
    CHECK(memcmp(buf, hello, sizeof hello) == 0, "payload");
    while (ibv_poll_cq(cq2, 1, &wc) == 0)
        ;
    CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 22 && wc.opcode == IBV_WC_SEND, "send wc %d", wc.status);

    /* A bad opcode: EINVAL, and bad_wr names the WR. */
    swr.opcode = 77;
    CHECK(ibv_post_send(b, &swr, &bad_s) == EINVAL && bad_s == &swr, "bad opcode");

    /* An RDMA WRITE with a wrong rkey: a's side raises an access error,
     * seen through the async fd with epoll. */
    int ep = epoll_create1(0);
    struct epoll_event ee = { .events = EPOLLIN };
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, ctx->async_fd, &ee) == 0, "epoll_ctl");
    struct ibv_sge wsge = { .addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey };
    struct ibv_send_wr wwr = { .wr_id = 33, .sg_list = &wsge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
        .send_flags = IBV_SEND_SIGNALED, .wr.rdma = { .remote_addr = (uintptr_t)buf, .rkey = mr->rkey ^ 0x5a5a } };
    CHECK(ibv_post_send(b, &wwr, &bad_s) == 0, "post bad write");
    while (ibv_poll_cq(cq2, 1, &wc) == 0)
        ;
    CHECK(wc.wr_id == 33 && wc.status == IBV_WC_REM_ACCESS_ERR, "write wc status %s", ibv_wc_status_str(wc.status));
    CHECK(epoll_wait(ep, &ee, 1, 10000) == 1, "the async fd became readable");
    struct ibv_async_event ae;
    CHECK(ibv_get_async_event(ctx, &ae) == 0, "get_async_event");
    CHECK(ae.event_type == IBV_EVENT_QP_ACCESS_ERR || ae.event_type == IBV_EVENT_QP_FATAL ||
          ae.event_type == IBV_EVENT_QP_REQ_ERR, "event %s", ibv_event_type_str(ae.event_type));
    CHECK(ae.element.qp == a || ae.element.qp == b, "the event names one of the QPs");
    ibv_ack_async_event(&ae);

    CHECK(ibv_resize_cq(cq, 128) == EOPNOTSUPP, "resize_cq");
    CHECK(ibv_destroy_cq(cq) == EBUSY, "destroy a CQ in use");
    CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "destroy qps");
    CHECK(ibv_destroy_cq(cq) == 0 && ibv_destroy_cq(cq2) == 0, "destroy cqs");
    CHECK(ibv_destroy_comp_channel(ch) == 0, "destroy channel");
    CHECK(ibv_dereg_mr(mr) == 0 && ibv_dealloc_pd(pd) == 0, "dereg, dealloc");
    CHECK(ibv_close_device(ctx) == 0, "close");

    /* Closed means closed: the device opens again (its socket was freed). */
    list = ibv_get_device_list(&n);
    CHECK(list && n == 1, "list again");
    ctx = ibv_open_device(list[0]);
    CHECK(ctx, "open again");
    ibv_free_device_list(list);
    pd = ibv_alloc_pd(ctx);
    CHECK(pd && ibv_dealloc_pd(pd) == 0, "pd again");
    CHECK(ibv_close_device(ctx) == 0, "close again");
    printf("ok\n");
    return 0;
}
