/* A program that loads libibverbs itself, as NCCL and Python's ctypes do:
 * dlopen("libibverbs.so") (the unversioned name, argv[1] may give another)
 * with no link-time dependency on it, then every verb through dlsym. It
 * checks that the library it got is roce's (it answers
 * ibv_get_device_list with the roce device) and that no second libibverbs
 * is mapped into the process (rdma-core's beside ours), and runs a verbs
 * round trip: two RC QPs of the device connected to each other, an RDMA
 * WRITE and a SEND, each checked byte for byte.
 * Prints "ok" and exits 0, or says what failed and exits 1. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAILED line %d: %s: ", __LINE__, #c); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, " (errno %d)\n", errno); exit(1); } } while (0)

static void *lib;

static void *sym(const char *name)
{
    void *p = dlsym(lib, name);
    CHECK(p, "dlsym %s: %s", name, dlerror());
    return p;
}

static int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);

static int count_libibverbs(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    if (strstr(info->dlpi_name, "ibverbs")) {
        ++*(int *)data;
        fprintf(stderr, "mapped: %s\n", info->dlpi_name);
    }
    return 0;
}

static void to_rts(struct ibv_qp *qp, uint32_t dest, union ibv_gid gid)
{
    struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
        .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE };
    CHECK(modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0, "INIT");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = dest; a.rq_psn = 0;
    a.max_dest_rd_atomic = 1; a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1; a.ah_attr.grh.dgid = gid; a.ah_attr.grh.hop_limit = 1; a.ah_attr.port_num = 1;
    CHECK(modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
          IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0, "RTR");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS; a.timeout = 14; a.retry_cnt = 7; a.rnr_retry = 7; a.sq_psn = 0; a.max_rd_atomic = 1;
    CHECK(modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0, "RTS");
}

static struct ibv_wc wait_one(struct ibv_cq *cq)
{
    struct ibv_wc wc;
    for (long i = 0; i < 100000000L; i++) {
        int n = ibv_poll_cq(cq, 1, &wc); /* inline: through cq->context->ops */
        CHECK(n >= 0, "poll");
        if (n == 1) {
            CHECK(wc.status == IBV_WC_SUCCESS, "wc status %d", wc.status);
            return wc;
        }
    }
    CHECK(0, "no completion");
    return wc;
}

int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : "libibverbs.so";
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    CHECK(lib, "dlopen %s: %s", name, dlerror());

    struct ibv_device **(*get_device_list)(int *) = sym("ibv_get_device_list");
    const char *(*get_device_name)(struct ibv_device *) = sym("ibv_get_device_name");
    struct ibv_context *(*open_device)(struct ibv_device *) = sym("ibv_open_device");
    int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *) = sym("ibv_query_gid");
    struct ibv_pd *(*alloc_pd)(struct ibv_context *) = sym("ibv_alloc_pd");
    struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int) = sym("ibv_reg_mr");
    struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int) =
        sym("ibv_create_cq");
    struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *) = sym("ibv_create_qp");
    int (*destroy_qp)(struct ibv_qp *) = sym("ibv_destroy_qp");
    int (*destroy_cq)(struct ibv_cq *) = sym("ibv_destroy_cq");
    int (*dereg_mr)(struct ibv_mr *) = sym("ibv_dereg_mr");
    int (*dealloc_pd)(struct ibv_pd *) = sym("ibv_dealloc_pd");
    int (*close_device)(struct ibv_context *) = sym("ibv_close_device");
    void (*free_device_list)(struct ibv_device **) = sym("ibv_free_device_list");
    modify_qp = sym("ibv_modify_qp");

    int n = -1;
    struct ibv_device **list = get_device_list(&n);
    CHECK(list && n == 1, "%d devices", n);
    CHECK(strcmp(get_device_name(list[0]), "roce0") == 0, "device %s", get_device_name(list[0]));
    int mapped = 0;
    dl_iterate_phdr(count_libibverbs, &mapped);
    CHECK(mapped == 1, "%d libibverbs mapped", mapped);
    Dl_info di;
    CHECK(dladdr((void *)get_device_list, &di) && di.dli_fname, "dladdr");
    fprintf(stderr, "libibverbs: %s\n", di.dli_fname);

    struct ibv_context *ctx = open_device(list[0]);
    CHECK(ctx, "open");
    free_device_list(list);
    union ibv_gid gid;
    CHECK(query_gid(ctx, 1, 0, &gid) == 0, "gid");
    struct ibv_pd *pd = alloc_pd(ctx);
    CHECK(pd, "pd");
    static char src[4096], dst[4096], rcv[4096];
    int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    struct ibv_mr *ms = reg_mr(pd, src, sizeof src, acc), *md = reg_mr(pd, dst, sizeof dst, acc),
                  *mr = reg_mr(pd, rcv, sizeof rcv, acc);
    CHECK(ms && md && mr, "mr");
    struct ibv_cq *cq = create_cq(ctx, 16, NULL, NULL, 0);
    CHECK(cq, "cq");
    struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
        .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
    struct ibv_qp *a = create_qp(pd, &ia), *b = create_qp(pd, &ia);
    CHECK(a && b, "qp");
    to_rts(a, b->qp_num, gid);
    to_rts(b, a->qp_num, gid);

    for (unsigned i = 0; i < sizeof src; i++)
        src[i] = (char)(i * 7 + 1);
    struct ibv_sge sge = { .addr = (uintptr_t)src, .length = sizeof src, .lkey = ms->lkey };
    struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
        .send_flags = IBV_SEND_SIGNALED, .wr.rdma = { .remote_addr = (uintptr_t)dst, .rkey = md->rkey } }, *bad;
    CHECK(ibv_post_send(a, &wr, &bad) == 0, "post write");
    CHECK(wait_one(cq).wr_id == 1, "write completion");
    CHECK(memcmp(src, dst, sizeof src) == 0, "written bytes differ");

    struct ibv_sge rs = { .addr = (uintptr_t)rcv, .length = sizeof rcv, .lkey = mr->lkey };
    struct ibv_recv_wr rw = { .wr_id = 2, .sg_list = &rs, .num_sge = 1 }, *rbad;
    CHECK(ibv_post_recv(b, &rw, &rbad) == 0, "post recv");
    wr.wr_id = 3; wr.opcode = IBV_WR_SEND;
    CHECK(ibv_post_send(a, &wr, &bad) == 0, "post send");
    struct ibv_wc w1 = wait_one(cq), w2 = wait_one(cq);
    CHECK(w1.wr_id + w2.wr_id == 5, "send completions %llu %llu",
          (unsigned long long)w1.wr_id, (unsigned long long)w2.wr_id);
    CHECK(memcmp(src, rcv, sizeof src) == 0, "sent bytes differ");

    CHECK(destroy_qp(a) == 0 && destroy_qp(b) == 0, "destroy qp");
    CHECK(destroy_cq(cq) == 0, "destroy cq");
    CHECK(dereg_mr(ms) == 0 && dereg_mr(md) == 0 && dereg_mr(mr) == 0, "dereg");
    CHECK(dealloc_pd(pd) == 0, "dealloc pd");
    CHECK(close_device(ctx) == 0, "close");
    puts("ok");
    return 0;
}
