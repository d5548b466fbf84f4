/* cli.c -- the command-line modes of sits-dist:
 *   --help, --version, --print-config     (no model needed)
 *   --model DIR --prompt-ids 1,2,3 ...     offline generation, prints ids and tokens/s
 * Every rank of the job runs this; rank 0 prints. Start-up failures on any rank are agreed on by
 * all ranks (one all-reduce) so the whole job exits with that rank's reason instead of hanging. */
#include "cli.h"
#include "backend/backend.h"
#include "comm/comm.h"
#include "sched/generate.h"
#include "model/gguf.h"
#include "model/precision.h"
#include "util/check.h"
#include "util/log.h"
#include "util/params.h"
#include "topology/topology.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"
#include "server/server.h"
#include "sched/scheduler.h"
#include "sched/worker.h"
#include "kv/offload.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

enum { EXIT_USAGE = 2 };
#define CPU_KV_SHARE 0.25   /* serve on the CPU without --kv-cache-memory: KV at most this share of the free memory */
#define REPLY_GRACE_S 10.0   /* after the drain: time for the clients to receive their last bytes */

static void print_help(FILE *out)
{
    fprintf(out,
            "sits-dist %s -- distributed tensor-parallel LLM inference\n\n"
            "usage: mpirun -np N sits-dist --model DIR [--port 8000] [flags]      (OpenAI-compatible server on rank 0)\n"
            "       sits-dist --model DIR --prompt-ids 128000,791,... --max-tokens 32 --temperature 0\n"
            "       sits-dist --model DIR --prompt \"text\" [--chat] | --tokenize \"text\" | --detokenize 1,2,3\n"
            "       sits-dist --print-config | --help | --help-man (the man page, troff) | --version\n\n"
            "flags (--name value or --name=value; booleans also --name / --no-name):\n",
            PACKAGE_VERSION);
    for (size_t i = 0; i < sits_params_count; i++) {
        const sits_param_t *p = &sits_params[i];
        char left[64];
        snprintf(left, sizeof left, "--%s%s", p->name, p->type == SITS_PT_BOOL ? "" : (p->implicit ? "[=V]" : " V"));
        fprintf(out, "  %-24s %s", left, p->help);
        if (p->def[0]) fprintf(out, " (default %s)", p->def);
        if (p->env) fprintf(out, " [%s]", p->env);
        fprintf(out, "\n");
    }
    fprintf(out, "\nlogging: SITS_LOG_LEVEL, SITS_LOG_SUBSYS, SITS_LOG_FILE (see README.md)\n");
}

/* "1,2, 3" -> ids; SITS_ERR_INVALID with a message on anything else. */
static sits_status_t parse_ids(const char *s, int32_t **ids_p, int *n_p)
{
    size_t cap = 16;
    int n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return SITS_ERR_NOMEM;
    const char *p = s;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',' && *end != ' ')) {
            fprintf(stderr, "sits-dist: bad token id list '%s' (expected comma-separated non-negative integers)\n", s);
            free(ids);
            return SITS_ERR_INVALID;
        }
        if ((size_t)n == cap) {
            int32_t *nids = realloc(ids, (cap *= 2) * sizeof *ids);
            if (!nids) { free(ids); return SITS_ERR_NOMEM; }
            ids = nids;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    if (n == 0) {
        fprintf(stderr, "sits-dist: empty token id list\n");
        free(ids);
        return SITS_ERR_INVALID;
    }
    *ids_p = ids;
    *n_p = n;
    return SITS_OK;
}

/* Every rank contributes its status; returns the first failing rank's status (or OK) on all ranks. */
static sits_status_t agree(sits_status_t mine, const char *what, double timeout_s)
{
    struct { int st; int rank; } in, outv;
    MPI_Comm_rank(MPI_COMM_WORLD, &in.rank);
    in.st = (int)mine;
    MPI_Request req;
    if (MPI_Iallreduce(&in, &outv, 1, MPI_2INT, MPI_MINLOC, MPI_COMM_WORLD, &req) != MPI_SUCCESS) return SITS_ERR_MPI;
    sits_status_t st = sits_comm_mpi_wait(&req, timeout_s, what, MPI_COMM_WORLD);
    if (st != SITS_OK) return st;
    if (outv.st != SITS_OK) {
        if (in.rank == 0 || outv.rank == in.rank)
            fprintf(stderr, "sits-dist: %s failed on rank %d: %s (see the log lines above)\n", what, outv.rank,
                    sits_status_str((sits_status_t)outv.st));
        return (sits_status_t)outv.st;
    }
    return SITS_OK;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* [int8 kv] --kv-cache-dtype on a fresh backend; the backend is destroyed on an error. */
static sits_status_t set_kv_dtype(const sits_config_t *cfg, sits_backend_t **be_p)
{
    sits_dtype_t dt;
    sits_status_t st = sits_backend_kv_dtype_parse(cfg->kv_cache_dtype, (*be_p)->act_dtype, &dt);
    if (st == SITS_OK) st = sits_backend_set_kv_dtype(*be_p, dt);
    if (st != SITS_OK) {
        sits_backend_destroy(*be_p);
        *be_p = NULL;
    }
    return st;
}

/* The backend of this rank: its GPU from the placement, or the CPU with the cores it was bound to. */
static sits_status_t make_backend(const sits_config_t *cfg, const sits_placement_t *pl, int bound_cores,
                                  sits_backend_t **be_p)
{
    const char *dev = cfg->device ? cfg->device : "auto";
    const sits_topo_rank_t *me = &pl->ranks[pl->self];
    int n_gpu = sits_backend_cuda_device_count();
    if (!strcmp(dev, "cuda") || (!strcmp(dev, "auto") && n_gpu > 0)) {
        if (me->gpu < 0 || me->gpu >= n_gpu) {
            SITS_ERROR(SITS_SUB_INIT, "rank %d has no GPU (%d usable on its node, %d local ranks)", pl->self, n_gpu,
                       me->local_size);
            return SITS_ERR_INVALID;
        }
        int64_t gv = cfg->gemv_max_tokens;   /* the backend takes at most 16 (SITS_K_GEMV_MAX_N); 0 here means never */
        sits_backend_params_t bp = { .device = me->gpu, .no_gemm_tune = !cfg->gemm_autotune,
                                     .gemv_max_tokens = gv > 0 ? (int)(gv < 16 ? gv : 16) : -1 };
        SITS_CHECK(sits_backend_cuda_create(&bp, be_p));
        return set_kv_dtype(cfg, be_p);
    }
    if (strcmp(dev, "cpu") && strcmp(dev, "auto")) {
        SITS_ERROR(SITS_SUB_INIT, "unknown --device '%s' (auto, cpu or cuda)", dev);
        return SITS_ERR_INVALID;
    }
    int threads = (int)cfg->threads;   /* --threads, else the binding's cores shared out (layout_init) */
    if (threads <= 0) threads = bound_cores > 0 ? bound_cores : me->n_cores;
    if (threads <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cores > 0 ? (int)(cores / (me->local_size > 0 ? me->local_size : 1)) : 1;
    }
    if (threads < 1) threads = 1;
    sits_backend_params_t bp = { .threads = threads };
    SITS_CHECK(sits_backend_cpu_create(&bp, be_p));
    return set_kv_dtype(cfg, be_p);
}

/* Topology, placement, binding and the TP communicator of this rank. */
typedef struct {
    sits_topo_t *topo;
    sits_placement_t *pl;
    int bound_cores;                   /* CPU threads: the binding's cores shared out among the ranks on them */
    MPI_Comm tp_mpi, pp_mpi, dp_mpi;   /* this rank's groups (pp/dp: one rank each until --pp/--dp exist) */
    int disagg_p, disagg_d;            /* [kv move] --disaggregate P:D (0: off): TP groups [0, P) and [P, P + D) */
} sits_layout_t;

static void layout_fini(sits_layout_t *L)
{
    if (L->tp_mpi != MPI_COMM_NULL) MPI_Comm_free(&L->tp_mpi);
    if (L->pp_mpi != MPI_COMM_NULL) MPI_Comm_free(&L->pp_mpi);
    if (L->dp_mpi != MPI_COMM_NULL) MPI_Comm_free(&L->dp_mpi);
    sits_topo_placement_destroy(L->pl);
    sits_topo_destroy(L->topo);
}

static sits_status_t layout_init(const sits_config_t *cfg, sits_layout_t *L)
{
    memset(L, 0, sizeof *L);
    L->tp_mpi = L->pp_mpi = L->dp_mpi = MPI_COMM_NULL;
    sits_status_t st = sits_topo_discover(cfg->topology_xml, &L->topo);
    if (agree(st, "topology discovery", cfg->step_timeout) != SITS_OK) return st != SITS_OK ? st : SITS_ERR_PEER;
    if (cfg->disaggregate) {
        /* [kv move] two TP groups of their own sizes: placed as one-rank replicas (each rank its GPU
         * and cores), the TP communicator split below */
        int world = 1, rank = 0, P = 0, D = 0, end = 0;
        MPI_Comm_size(MPI_COMM_WORLD, &world);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        if (sscanf(cfg->disaggregate, "%d:%d%n", &P, &D, &end) != 2 || cfg->disaggregate[end] || P < 1 || D < 1 ||
            P + D != world || cfg->tp > 0 || cfg->pp != 1 || cfg->dp != 1) {
            if (rank == 0)
                fprintf(stderr, "sits-dist: --disaggregate %s: need P:D with P, D >= 1 and P + D = %d ranks, without --tp, --pp, --dp\n",
                        cfg->disaggregate, world);
            return SITS_ERR_INVALID;
        }
        L->disagg_p = P;
        L->disagg_d = D;
        st = sits_topo_place(MPI_COMM_WORLD, L->topo, 1, 1, world, &L->pl);
    } else {
        st = sits_topo_place(MPI_COMM_WORLD, L->topo, (int)cfg->tp, (int)cfg->pp, (int)cfg->dp, &L->pl);
    }
    if (agree(st, "rank placement", cfg->step_timeout) != SITS_OK) return st != SITS_OK ? st : SITS_ERR_PEER;
    if (cfg->bind && !cfg->topology) sits_topo_bind(L->topo, L->pl, &L->bound_cores);
    if (!cfg->topology) {
        /* CPU threads: the cores of this rank's binding divided among the ranks that share them */
        int threads = 0;
        st = sits_topo_rank_threads(MPI_COMM_WORLD, L->topo, &threads, NULL);
        if (st != SITS_OK) return st;
        if (threads > 0) L->bound_cores = threads;
    }
    /* one communicator per group kind, from the placement (a TP group is not always consecutive ranks) */
    static const sits_topo_group_t kinds[3] = { SITS_TOPO_GROUP_TP, SITS_TOPO_GROUP_PP, SITS_TOPO_GROUP_DP };
    MPI_Comm *out[3] = { &L->tp_mpi, &L->pp_mpi, &L->dp_mpi };
    for (int k = 0; k < 3; k++) {
        int color = 0, key = 0;
        sits_topo_group_of(L->pl, kinds[k], L->pl->self, &color, &key, NULL);
        if (MPI_Comm_split(MPI_COMM_WORLD, color, key, out[k]) != MPI_SUCCESS) return SITS_ERR_MPI;
    }
    if (L->disagg_p) {   /* [kv move] the prefill and the decode TP groups */
        MPI_Comm_free(&L->tp_mpi);
        if (MPI_Comm_split(MPI_COMM_WORLD, L->pl->self < L->disagg_p ? 0 : 1, L->pl->self, &L->tp_mpi) != MPI_SUCCESS)
            return SITS_ERR_MPI;
    }
    return SITS_OK;
}

/* The TP group's communicators: MPI on host buffers (plans, sampling) and, on GPUs with TP > 1,
 * NCCL for the tensors (collective over the group). */
/* The control communicators of pipelines and data-parallel replicas (plans, sampled tokens):
 *  - pp > 1: the activation communicator between the stages (MPI on the CPU, NCCL on GPUs);
 *  - replica 0 (with world rank 0, the front-end): its own ranks;
 *  - replica r > 0: world rank 0 plus its ranks (rank 0 sends its plans, receives its tokens); rank 0
 *    keeps one of these per remote replica in remote[r] with the token root in remote_root[r].
 * token root = the ctl rank of the replica's last stage, TP rank 0. */
typedef struct {
    sits_comm_t *pp, *ctl;
    sits_comm_t *remote[SITS_TOPO_MAX_GPUS];
    int remote_root[SITS_TOPO_MAX_GPUS];
    sits_comm_t *kv;   /* [kv move] every rank of the job, for KV moves (--dp > 1, --disaggregate); NULL otherwise */
} sits_instance_t;

static void instance_fini(sits_instance_t *I)
{
    for (int r = 0; r < SITS_TOPO_MAX_GPUS; r++) sits_comm_destroy(I->remote[r]);
    sits_comm_destroy(I->kv);
    sits_comm_destroy(I->ctl);
    sits_comm_destroy(I->pp);
    memset(I, 0, sizeof *I);
}

/* ctl rank of the (last stage, tp 0) rank of the replica(s) in c; -1 from ranks outside them */
static int token_root_of(MPI_Comm c, int is_root)
{
    int me = 0, mine, root = -1;
    MPI_Comm_rank(c, &me);
    mine = is_root ? me : -1;
    MPI_Allreduce(&mine, &root, 1, MPI_INT, MPI_MAX, c);
    return root;
}

/* [kv move] The communicator of KV moves: every rank of the job; NCCL on GPUs (grouped
 * ncclSend/ncclRecv between the two groups of a move), MPI on the CPU. */
static sits_status_t make_kv_comm(const sits_config_t *cfg, sits_backend_t *be, sits_instance_t *I)
{
    if (sits_backend_cuda_stream(be)) {
#ifdef HAVE_NCCL
        return sits_comm_nccl_create(MPI_COMM_WORLD, be, cfg->step_timeout, &I->kv);
#else
        SITS_ERROR(SITS_SUB_INIT, "KV moves between GPUs (--dp, --disaggregate) need NCCL");
        return SITS_ERR_UNSUPPORTED;
#endif
    }
    return sits_comm_mpi_create(MPI_COMM_WORLD, cfg->step_timeout, &I->kv);
}

/* [kv move] --disaggregate P:D: the prefill group (world ranks [0, P), with the front-end) is
 * replica 0, its TP group its whole instance; the decode group is replica 1, driven like a remote
 * replica over world rank 0 plus its ranks (token root: its TP rank 0, world rank P). */
static sits_status_t make_disagg_comms(const sits_config_t *cfg, const sits_layout_t *L, sits_backend_t *be,
                                       sits_runner_params_t *rp, sits_instance_t *I)
{
    int rank = L->pl->self, P = L->disagg_p, in = rank == 0 || rank >= P;
    MPI_Comm c = MPI_COMM_NULL;
    if (MPI_Comm_split(MPI_COMM_WORLD, in ? 0 : MPI_UNDEFINED, rank == 0 ? -1 : rank, &c) != MPI_SUCCESS) return SITS_ERR_MPI;
    if (c != MPI_COMM_NULL) {
        int root = token_root_of(c, rank == P);
        sits_comm_t *sc = NULL;
        sits_status_t st = sits_comm_mpi_create(c, cfg->step_timeout, &sc);
        MPI_Comm_free(&c);
        SITS_CHECK(st);
        if (rank == 0) {
            I->remote[1] = sc;
            I->remote_root[1] = root;
        } else {
            I->ctl = sc;
            rp->ctl = sc;
            rp->token_root = root;
        }
    }
    return make_kv_comm(cfg, be, I);
}

static sits_status_t make_instance_comms(const sits_config_t *cfg, const sits_layout_t *L, sits_backend_t *be,
                                         sits_runner_params_t *rp, sits_instance_t *I)
{
    const sits_placement_t *pl = L->pl;
    const sits_topo_rank_t *me = &pl->ranks[pl->self];
    int D = pl->dp, P = pl->pp, rank = pl->self;
    int is_root = me->pp_rank == P - 1 && me->tp_rank == 0;
    memset(I, 0, sizeof *I);
    if (L->disagg_p) return make_disagg_comms(cfg, L, be, rp, I);
    if (D > SITS_TOPO_MAX_GPUS) return SITS_ERR_INVALID;
    if (sits_topo_layout_rank(pl, 0, 0, 0) != 0) {
        SITS_ERROR(SITS_SUB_INIT, "the front-end needs world rank 0 at replica 0, stage 0, tp rank 0");
        return SITS_ERR_INVALID;
    }
    if (P > 1) {
        if (sits_backend_cuda_stream(be)) {
#ifdef HAVE_NCCL
            SITS_CHECK(sits_comm_nccl_create(L->pp_mpi, be, cfg->step_timeout, &I->pp));
#else
            SITS_ERROR(SITS_SUB_INIT, "pipeline parallelism on GPUs needs NCCL");
            return SITS_ERR_UNSUPPORTED;
#endif
        } else {
            SITS_CHECK(sits_comm_mpi_create(L->pp_mpi, cfg->step_timeout, &I->pp));
        }
        rp->pp = I->pp;
    }
    if (P == 1 && D == 1) return SITS_OK;   /* the TP group is the whole instance */
    /* replica 0's ranks (collective over the world) */
    MPI_Comm inst = MPI_COMM_NULL, c;
    if (MPI_Comm_split(MPI_COMM_WORLD, me->dp_rank == 0 ? 0 : MPI_UNDEFINED, rank, &inst) != MPI_SUCCESS) return SITS_ERR_MPI;
    if (inst != MPI_COMM_NULL) {
        int root = token_root_of(inst, is_root);
        sits_status_t st = sits_comm_mpi_create(inst, cfg->step_timeout, &I->ctl);
        MPI_Comm_free(&inst);
        SITS_CHECK(st);
        rp->ctl = I->ctl;
        rp->token_root = root;
    }
    for (int r = 1; r < D; r++) {
        int in = rank == 0 || me->dp_rank == r;
        if (MPI_Comm_split(MPI_COMM_WORLD, in ? 0 : MPI_UNDEFINED, rank == 0 ? -1 : rank, &c) != MPI_SUCCESS) return SITS_ERR_MPI;
        if (c == MPI_COMM_NULL) continue;
        int root = token_root_of(c, rank != 0 && is_root);
        sits_comm_t *sc = NULL;
        sits_status_t st = sits_comm_mpi_create(c, cfg->step_timeout, &sc);
        MPI_Comm_free(&c);
        SITS_CHECK(st);
        if (rank == 0) {
            I->remote[r] = sc;
            I->remote_root[r] = root;
        } else {
            I->ctl = sc;
            rp->ctl = sc;
            rp->token_root = root;
        }
    }
    return make_kv_comm(cfg, be, I);   /* [kv move] migrations between the replicas */
}

static sits_status_t make_comms(const sits_config_t *cfg, const sits_layout_t *L, sits_backend_t *be, sits_comm_t **tp_p,
                                sits_comm_t **tp_dev_p)
{
    SITS_CHECK(sits_comm_mpi_create(L->tp_mpi, cfg->step_timeout, tp_p));
    if (!sits_backend_cuda_stream(be) || (*tp_p)->size == 1) return SITS_OK;
#ifdef HAVE_NCCL
    if (cfg->custom_allreduce && !L->disagg_p) {   /* [kv move] disaggregated groups: NCCL only */
        /* NVLink between every pair of this group's GPUs: 1 yes, 0 no, -1 unknown (no NVML / XML info) */
        int nvlink = strcmp(sits_topo_nvlink_source(L->topo), "none") ? 1 : -1;
        int color = 0, key = 0, members[SITS_TOPO_MAX_GPUS];
        sits_topo_group_of(L->pl, SITS_TOPO_GROUP_TP, L->pl->self, &color, &key, members);
        for (int i = 0; nvlink == 1 && i < (*tp_p)->size; i++)
            for (int j = i + 1; j < (*tp_p)->size; j++) {
                int a = L->pl->ranks[members[i]].gpu, b = L->pl->ranks[members[j]].gpu;
                if (a < 0 || b < 0 || sits_topo_nvlink_gbps(L->topo, a, b, NULL) <= 0) nvlink = 0;
            }
        return sits_comm_custom_ar_create(L->tp_mpi, be, cfg->step_timeout, cfg->custom_allreduce_max_bytes, -1, nvlink,
                                          tp_dev_p);
    }
    return sits_comm_nccl_create(L->tp_mpi, be, cfg->step_timeout, tp_dev_p);
#else
    SITS_ERROR(SITS_SUB_INIT, "tensor parallelism on GPUs needs NCCL (configure --with-nccl)");
    return SITS_ERR_UNSUPPORTED;
#endif
}

/* What a rank holds to run the model: its backend, its TP / pipeline / replica communicators and
 * the runner (weights, engine, KV). Set up collectively: a failure on any rank fails every rank. */
typedef struct {
    sits_backend_t *be;
    sits_comm_t *tp, *tp_dev;
    sits_instance_t inst;
    sits_runner_t *r;
} sits_rank_t;

static void rank_fini(sits_rank_t *k)
{
    sits_runner_destroy(k->r);
    instance_fini(&k->inst);
    sits_comm_destroy(k->tp_dev);
    sits_comm_destroy(k->tp);
    sits_backend_destroy(k->be);
    memset(k, 0, sizeof *k);
}

/* rp: the sizes (max_seqs, max_tokens, ...); the model, load format and communicators are filled in here. */
static sits_status_t rank_setup(const sits_config_t *cfg, const sits_layout_t *L, sits_runner_params_t *rp, sits_rank_t *k)
{
    sits_status_t st = SITS_OK;
    memset(k, 0, sizeof *k);
    const char *lf = cfg->load_format ? cfg->load_format : "auto";
    if (strcmp(lf, "dummy") && strcmp(lf, "auto") && strcmp(lf, "safetensors")) {
        SITS_ERROR(SITS_SUB_INIT, "unknown --load-format '%s' (auto, safetensors, dummy)", lf);
        return SITS_ERR_INVALID;
    }
    rp->model_dir = cfg->model;
    rp->dummy = !strcmp(lf, "dummy");
    rp->dummy_seed = 0x5175d157ull;
    { /* [fp8] the --quant syntax, before any set-up (layer ranges are checked against the model at load) */
        char qerr[256];
        if (sits_quant_plan_parse(cfg->quant, 0, NULL, qerr, sizeof qerr) != SITS_OK) {
            SITS_ERROR(SITS_SUB_INIT, "%s", qerr);
            return SITS_ERR_INVALID;
        }
        rp->quant = cfg->quant;
    }
    if (cfg->pp_microbatches < 0 || cfg->pp_microbatch_min_tokens < 0) {
        SITS_ERROR(SITS_SUB_INIT, "--pp-microbatches %lld / --pp-microbatch-min-tokens %lld: need 0 (one per stage) or more / 0 (auto) or more",
                   (long long)cfg->pp_microbatches, (long long)cfg->pp_microbatch_min_tokens);
        return SITS_ERR_INVALID;
    }
    rp->pp_microbatches = cfg->pp_microbatches > 0 ? (int)cfg->pp_microbatches : L->pl->pp;
    rp->pp_microbatch_min_tokens = (int)cfg->pp_microbatch_min_tokens;
    if (cfg->ep < 1 || cfg->ep > 1 << 20) {   /* [moe] ep == tp and E % ep are checked at load, against the model */
        SITS_ERROR(SITS_SUB_INIT, "--ep %lld: need 1 (experts TP-sharded) or the tensor-parallel size", (long long)cfg->ep);
        return SITS_ERR_INVALID;
    }
    rp->ep = (int)cfg->ep;
    if (cfg->moe_device_max_tokens < 0 || cfg->moe_device_max_tokens > SITS_MOE_DEV_MAX_SLOTS) {
        SITS_ERROR(SITS_SUB_INIT, "--moe-device-max-tokens %lld: need 0 (off) .. %d", (long long)cfg->moe_device_max_tokens,
                   SITS_MOE_DEV_MAX_SLOTS);
        return SITS_ERR_INVALID;
    }
    rp->moe_dev_max = cfg->moe_device_max_tokens > 0 ? (int)cfg->moe_device_max_tokens : -1;
    st = make_backend(cfg, L->pl, L->bound_cores, &k->be);
    if (st == SITS_OK) st = make_comms(cfg, L, k->be, &k->tp, &k->tp_dev);
    if ((st = agree(st, "backend set-up", cfg->step_timeout)) != SITS_OK) goto err;
    st = make_instance_comms(cfg, L, k->be, rp, &k->inst);
    if ((st = agree(st, "pipeline / replica set-up", cfg->step_timeout)) != SITS_OK) goto err;
    st = sits_runner_create(rp, k->be, k->tp, k->tp_dev, &k->r);
    if ((st = agree(st, "model load", cfg->step_timeout)) != SITS_OK) goto err;
    k->r->kv_comm = k->inst.kv;   /* [kv move] */
    /* KV block ids are shared across ranks: every rank hands out the smallest count (with
     * --gpu-memory-utilization each GPU may fit a different number) */
    int mine = k->r->ep.n_blocks, all = mine;
    MPI_Request req;
    if (MPI_Iallreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &req) != MPI_SUCCESS) { st = SITS_ERR_MPI; goto err; }
    if ((st = sits_comm_mpi_wait(&req, cfg->step_timeout, "kv block count agreement", MPI_COMM_WORLD)) != SITS_OK) goto err;
    if ((st = sits_runner_limit_blocks(k->r, all)) != SITS_OK) goto err;
    return SITS_OK;
err:
    rank_fini(k);
    return st;
}

/* --prompt: encode with the model's tokenizer (through the chat template with --chat). Returns 0 or an exit code. */
static int encode_prompt(const sits_config_t *cfg, sits_tokenizer_t **tok_p, int32_t **ids_p, int *n_p)
{
    sits_tokenizer_t *tok = NULL;
    if (sits_tokenizer_load(cfg->model, &tok) != SITS_OK) {
        fprintf(stderr, "sits-dist: cannot load the tokenizer of %s (see the log above)\n", cfg->model);
        return 1;
    }
    size_t bad = 0;
    if (!sits_utf8_valid(cfg->prompt, strlen(cfg->prompt), &bad)) {
        fprintf(stderr, "sits-dist: --prompt is not valid UTF-8 (byte %zu)\n", bad);
        sits_tokenizer_destroy(tok);
        return EXIT_USAGE;
    }
    char *rendered = NULL;
    const char *text = cfg->prompt;
    if (cfg->chat || cfg->chat_template) {
        sits_chat_msg_t m = { "user", cfg->prompt };
        sits_chat_t *chat = NULL;
        sits_tmpl_error_t terr = { 0 };
        sits_status_t cst = sits_chat_load(cfg->model, cfg->chat_template, &chat);
        if (cst == SITS_OK) cst = sits_chat_render_simple(chat, &m, 1, 1, &rendered, &terr);
        sits_chat_destroy(chat);
        if (cst != SITS_OK) {
            fprintf(stderr, "sits-dist: cannot render the chat template: %s\n",
                    terr.msg[0] ? terr.msg : "see the log above; --chat-template FILE|NAME picks one");
            sits_tokenizer_destroy(tok);
            return EXIT_USAGE;
        }
        text = rendered;
    }
    size_t n = 0;
    sits_status_t st = sits_tokenizer_encode(tok, text, strlen(text), rendered ? 0 : 1, ids_p, &n);
    free(rendered);
    if (st != SITS_OK || n == 0) {
        fprintf(stderr, "sits-dist: the prompt encodes to no tokens\n");
        free(*ids_p);
        sits_tokenizer_destroy(tok);
        return EXIT_USAGE;
    }
    *n_p = (int)n;
    *tok_p = tok;
    return 0;
}

/* Sampling defaults of requests (--generation-config auto | vllm | DIR). */
static sits_status_t load_gen_defaults(const sits_config_t *cfg, sits_gen_defaults_t *d)
{
    memset(d, 0, sizeof *d);
    const char *src = cfg->generation_config && cfg->generation_config[0] ? cfg->generation_config : "auto";
    if (!strcmp(src, "vllm")) return SITS_OK;
    SITS_CHECK(sits_model_gen_defaults_load(!strcmp(src, "auto") ? cfg->model : src, d));
    if (d->has_temperature || d->has_top_p || d->has_top_k)
        SITS_INFO(SITS_SUB_INIT, "request sampling defaults from %s/generation_config.json:%s%.3g%s%.3g%s%d",
                  !strcmp(src, "auto") ? cfg->model : src, d->has_temperature ? " temperature " : "",
                  d->has_temperature ? d->temperature : 0.0, d->has_top_p ? " top_p " : "", d->has_top_p ? d->top_p : 0.0,
                  d->has_top_k ? " top_k " : "", d->has_top_k ? d->top_k : 0);
    return SITS_OK;
}

/* --render-chat FILE: the chat template on a conversation, printed exactly (no newline added). Needs only
 * the model's tokenizer_config.json / chat_template.jinja. Returns an exit code. */
static int run_render_chat(const sits_config_t *cfg)
{
    json_error_t jerr;
    json_t *in = json_load_file(cfg->render_chat, 0, &jerr);
    if (!in) {
        fprintf(stderr, "sits-dist: --render-chat %s: line %d: %s\n", cfg->render_chat, jerr.line, jerr.text);
        return EXIT_USAGE;
    }
    int rc = EXIT_USAGE;
    sits_chat_t *chat = NULL;
    char *out = NULL;
    size_t len = 0;
    const json_t *msgs = json_object_get(in, "messages"), *agp = json_object_get(in, "add_generation_prompt");
    const json_t *cfm = json_object_get(in, "continue_final_message"), *kw = json_object_get(in, "chat_template_kwargs");
    const json_t *name = json_object_get(in, "chat_template_name");
    if (!json_is_object(in) || !json_is_array(msgs) || (agp && !json_is_boolean(agp)) || (cfm && !json_is_boolean(cfm)) ||
        (kw && !json_is_object(kw)) || (name && !json_is_string(name))) {
        fprintf(stderr, "sits-dist: --render-chat %s: need an object {\"messages\": [...], \"tools\": [...], "
                        "\"documents\": [...], \"add_generation_prompt\": bool, \"continue_final_message\": bool, "
                        "\"chat_template_kwargs\": {...}, \"chat_template_name\": string}\n", cfg->render_chat);
        goto out;
    }
    if (sits_chat_load(cfg->model, cfg->chat_template, &chat) != SITS_OK) {
        fprintf(stderr, "sits-dist: cannot load the chat template of %s (see the log above)\n", cfg->model);
        rc = 1;
        goto out;
    }
    sits_chat_input_t ci = { .messages = msgs, .tools = json_object_get(in, "tools"),
                             .documents = json_object_get(in, "documents"), .kwargs = kw,
                             .template_name = name ? json_string_value(name) : NULL,
                             .add_generation_prompt = json_is_true(agp), .continue_final_message = json_is_true(cfm) };
    sits_tmpl_error_t terr = { 0 };
    if (sits_chat_render(chat, &ci, &out, &len, &terr) != SITS_OK) {
        fprintf(stderr, "sits-dist: chat template (%s): %s\n", sits_chat_source(chat), terr.msg[0] ? terr.msg : "failed");
        rc = 1;
        goto out;
    }
    fwrite(out, 1, len, stdout);
    fflush(stdout);
    rc = 0;
out:
    free(out);
    sits_chat_destroy(chat);
    json_decref(in);
    return rc;
}

/* --tokenize / --detokenize: print and exit (rank 0). */
static int run_tokenizer_mode(const sits_config_t *cfg)
{
    sits_tokenizer_t *tok = NULL;
    if (sits_tokenizer_load(cfg->model, &tok) != SITS_OK) {
        fprintf(stderr, "sits-dist: cannot load the tokenizer of %s (see the log above)\n", cfg->model);
        return 1;
    }
    int rc = 0;
    if (cfg->tokenize || !cfg->detokenize) {   /* --tokenize "" reads as unset: the empty text (its special tokens) */
        const char *text = cfg->tokenize ? cfg->tokenize : "";
        int32_t *ids = NULL;
        size_t n = 0;
        size_t bad = 0;
        if (!sits_utf8_valid(text, strlen(text), &bad)) {
            fprintf(stderr, "sits-dist: --tokenize text is not valid UTF-8 (byte %zu)\n", bad);
            rc = EXIT_USAGE;
        } else if (sits_tokenizer_encode(tok, text, strlen(text), 1, &ids, &n) != SITS_OK) {
            rc = 1;
        } else {
            for (size_t i = 0; i < n; i++) printf("%s%d", i ? "," : "", ids[i]);
            printf("\n");
        }
        free(ids);
    } else {
        int32_t *ids = NULL;
        int n = 0;
        char *text = NULL;
        size_t len = 0;
        if (parse_ids(cfg->detokenize, &ids, &n) != SITS_OK) rc = EXIT_USAGE;
        else if (sits_tokenizer_decode(tok, ids, (size_t)n, 0, &text, &len) != SITS_OK) {
            fprintf(stderr, "sits-dist: cannot decode those ids (outside the vocabulary of %zu?)\n", sits_tokenizer_vocab_size(tok));
            rc = 1;
        } else {
            fwrite(text, 1, len, stdout);
            printf("\n");
        }
        free(text);
        free(ids);
    }
    sits_tokenizer_destroy(tok);
    return rc;
}

static int run_offline(const sits_config_t *cfg, const sits_layout_t *L, int rank, int world)
{
    int rc = 1;
    sits_status_t st = SITS_OK;
    sits_rank_t k;
    memset(&k, 0, sizeof k);
    int32_t *ids = NULL, **outs = NULL;
    const int32_t **prompts = NULL;
    int *plen = NULL, *olen = NULL, n_ids = 0;
    sits_sample_params_t *sp = NULL;
    int batch = (int)cfg->batch;

    sits_tokenizer_t *tok = NULL;
    if (cfg->max_tokens < 1 || batch < 1 || cfg->temperature < 0 || cfg->top_p <= 0 || cfg->top_p > 1) {
        if (rank == 0)
            fprintf(stderr, "sits-dist: need --max-tokens >= 1, --batch >= 1, --temperature >= 0, 0 < --top-p <= 1\n");
        return EXIT_USAGE;
    }
    if (L->disagg_p) {   /* [kv move] */
        if (rank == 0) fprintf(stderr, "sits-dist: --disaggregate splits a server's prefill and decode; offline generation runs one TP group\n");
        return EXIT_USAGE;
    }
    if (L->pl->dp > 1) {
        if (rank == 0) fprintf(stderr, "sits-dist: --dp replicas serve requests; offline generation runs one replica (use --tp and --pp)\n");
        return EXIT_USAGE;
    }
    if (cfg->prompt_ids) {
        if (parse_ids(cfg->prompt_ids, &ids, &n_ids) != SITS_OK) return EXIT_USAGE;
    } else {
        int urc = encode_prompt(cfg, &tok, &ids, &n_ids);
        if (urc) return urc;
    }

    /* generation_config.json gives the sampling flags left at their defaults */
    sits_gen_defaults_t gen = { 0 };
    if (load_gen_defaults(cfg, &gen) != SITS_OK) {
        rc = EXIT_USAGE;
        goto out;
    }
    double temperature = cfg->temperature, top_p = cfg->top_p;
    int top_k = (int)cfg->top_k;
    if (gen.has_temperature && !sits_config_is_set(cfg, "temperature")) temperature = gen.temperature;
    if (gen.has_top_p && !sits_config_is_set(cfg, "top-p")) top_p = gen.top_p;
    if (gen.has_top_k && !sits_config_is_set(cfg, "top-k")) top_k = gen.top_k;
    uint64_t seed = (uint64_t)cfg->seed;
    if (cfg->seed < 0) {
        seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
        MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    }
    sits_runner_params_t rp = {
        .max_seqs = batch, .max_tokens = n_ids * batch, .max_model_len = (int)cfg->max_model_len,
        .block_size = (int)cfg->block_size, .kv_bytes = cfg->kv_cache_memory, .no_cuda_graphs = !cfg->cuda_graphs,
    };
    double t0 = now_s();
    st = rank_setup(cfg, L, &rp, &k);
    if (st != SITS_OK) {
        rc = st == SITS_ERR_INVALID ? EXIT_USAGE : 1;
        goto out;
    }
    sits_runner_t *r = k.r;
    sits_backend_t *be = k.be;
    if (rank == 0)
        fprintf(stderr, "loaded %s (%d layers, hidden %d, vocab %d) on %d rank%s, %s backend, in %.2f s\n", cfg->model,
                r->cfg.n_layers, r->cfg.hidden_size, r->cfg.vocab_size, world, world > 1 ? "s" : "", be->ops->name,
                now_s() - t0);

    prompts = calloc((size_t)batch, sizeof *prompts);
    outs = calloc((size_t)batch, sizeof *outs);
    plen = calloc((size_t)batch, sizeof *plen);
    olen = calloc((size_t)batch, sizeof *olen);
    sp = calloc((size_t)batch, sizeof *sp);
    if (!prompts || !outs || !plen || !olen || !sp) { st = SITS_ERR_NOMEM; goto out; }
    for (int i = 0; i < batch; i++) {
        prompts[i] = ids;
        plen[i] = n_ids;
        outs[i] = malloc(sizeof(int32_t) * (size_t)cfg->max_tokens);
        if (!outs[i]) { st = SITS_ERR_NOMEM; goto out; }
        sp[i] = (sits_sample_params_t){ .temperature = (float)temperature, .top_k = top_k,
                                        .top_p = (float)top_p, .seed = seed + (uint64_t)i };
    }
    sits_gen_stats_t gs;
    st = sits_generate(r, batch, prompts, plen, (int)cfg->max_tokens, sp, cfg->ignore_eos, outs, olen, NULL, NULL, &gs);
    if (agree(st, "generation", cfg->step_timeout) != SITS_OK) goto out;
    if (rank == 0) {
        for (int i = 0; i < batch; i++) {
            if (tok) {
                char *text = NULL;
                size_t len = 0;
                if (sits_tokenizer_decode(tok, outs[i], (size_t)olen[i], 1, &text, &len) == SITS_OK) {
                    fwrite(text, 1, len, stdout);
                    free(text);
                }
            } else {
                for (int j = 0; j < olen[i]; j++) printf("%s%d", j ? "," : "", outs[i][j]);
            }
            printf("\n");
        }
        fflush(stdout);
        fprintf(stderr, "prefill: %d tokens in %.1f ms (%.1f tok/s); decode: %d tokens in %d steps, %.1f ms (%.1f tok/s, %.2f ms/step)\n",
                gs.n_prompt_tokens, gs.prefill_s * 1e3, gs.n_prompt_tokens / (gs.prefill_s > 0 ? gs.prefill_s : 1e-9),
                gs.n_generated - batch, gs.decode_steps, gs.decode_s * 1e3,
                (gs.n_generated - batch) / (gs.decode_s > 0 ? gs.decode_s : 1e-9),
                gs.decode_steps ? gs.decode_s * 1e3 / gs.decode_steps : 0.0);
    }
    rc = 0;
out:
    for (int i = 0; outs && i < batch; i++) free(outs[i]);
    free(outs);
    free(prompts);
    free(plen);
    free(olen);
    free(sp);
    free(ids);
    sits_tokenizer_destroy(tok);
    rank_fini(&k);
    return rc;
}

/* [speculative] The draft model of --speculative-config's draft_model, on the leader only (TP 1 over
 * its own communicator), sized like the target: the same sequences, tokens per step, context and
 * block size, and as many KV blocks as the target has (a draft never holds more positions). */
static sits_status_t make_draft_runner(const sits_config_t *cfg, const sits_spec_config_t *spec, sits_backend_t *be,
                                       const sits_runner_t *r, sits_comm_t **comm_p, sits_runner_t **draft_p)
{
    sits_model_config_t dc;
    sits_shard_dims_t dims;
    sits_shard_t one = { .tp_rank = 0, .tp_size = 1 };
    SITS_CHECK(sits_model_config_load(spec->model, &dc));
    SITS_CHECK(sits_shard_dims(&dc, &one, &dims));
    if (dc.vocab_size != r->cfg.vocab_size) {
        SITS_ERROR(SITS_SUB_INIT, "--speculative-config: the draft model %s has a vocabulary of %d ids, the model %d", spec->model,
                   dc.vocab_size, r->cfg.vocab_size);
        return SITS_ERR_INVALID;
    }
    size_t per_block = sits_engine_kv_block_bytes(&dc, &dims, be->kv_dtype, r->ep.block_size);
    sits_runner_params_t rp = { .model_dir = spec->model, .max_seqs = (int)cfg->max_num_seqs,
                                .max_tokens = (int)cfg->max_num_batched_tokens, .max_model_len = r->max_model_len,
                                .block_size = r->ep.block_size, .kv_bytes = (int64_t)(per_block * (size_t)r->ep.n_blocks),
                                .no_cuda_graphs = !cfg->cuda_graphs };
    SITS_CHECK(sits_comm_mpi_create(MPI_COMM_SELF, cfg->step_timeout, comm_p));
    sits_status_t st = sits_runner_create(&rp, be, *comm_p, NULL, draft_p);
    if (st != SITS_OK) {
        sits_comm_destroy(*comm_p);
        *comm_p = NULL;
        return st;
    }
    SITS_INFO(SITS_SUB_INIT, "draft model %s: %d layers, hidden %d, %d KV blocks", spec->model, dc.n_layers, dc.hidden_size,
              (*draft_p)->ep.n_blocks);
    return SITS_OK;
}

/* [kv offload] This rank's offload tiers for the KV swaps of the server (--kv-host-bytes,
 * --kv-offload-dir, --kv-offload-lz4), owned by the runner; *on_p: the scheduler may swap. */
static sits_status_t make_offload(const sits_config_t *cfg, sits_backend_t *be, int rank, sits_runner_t *r, int *on_p)
{
    sits_kv_lz4_mode_t lz4;
    *on_p = 0;
    if (sits_kv_lz4_mode_parse(cfg->kv_offload_lz4, &lz4) != SITS_OK) {
        SITS_ERROR(SITS_SUB_INIT, "unknown --kv-offload-lz4 '%s' (auto, on or off)", cfg->kv_offload_lz4);
        return SITS_ERR_INVALID;
    }
    if (!(cfg->kv_offload_threshold > 0 && cfg->kv_offload_threshold <= 1) || cfg->kv_host_bytes < 0) {
        SITS_ERROR(SITS_SUB_INIT, "need 0 < --kv-offload-threshold <= 1 and --kv-host-bytes >= 0");
        return SITS_ERR_INVALID;
    }
    int dir = cfg->kv_offload_dir && cfg->kv_offload_dir[0];
    if (cfg->kv_host_bytes == 0 && !dir) return SITS_OK;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    sits_kv_offload_params_t op = { .host_bytes = (size_t)cfg->kv_host_bytes, .cap_to_free_ram = 1, .dir = cfg->kv_offload_dir,
                                    .lz4 = lz4, .threads = ncpu > 4 ? 4 : ncpu > 1 ? (int)ncpu : 1, .rank = rank, .be = be };
    SITS_CHECK(sits_kv_offload_create(&op, &r->offload));
    sits_kv_offload_stats_t os;
    sits_kv_offload_get_stats(r->offload, &os);
    SITS_INFO(SITS_SUB_KV, "kv offload: swap out above %.0f%% of the KV blocks; host tier %.2f GiB, disk tier %s, lz4 %s",
              100.0 * cfg->kv_offload_threshold, (double)os.host_cap / (1u << 30), os.disk ? cfg->kv_offload_dir : "off",
              cfg->kv_offload_lz4 ? cfg->kv_offload_lz4 : "auto");
    *on_p = 1;
    return SITS_OK;
}

/* Signals (the only mutable globals besides the logger: a handler has no other way in). The first
 * SIGTERM/SIGINT drains: the server answers 503 from that instant (g_srv), the scheduler finishes
 * what was admitted (up to --shutdown-timeout), the server delivers every response; a second one
 * stops at once (g_stop 2).
 * Serve mode blocks both signals in every thread (from before MPI_Init, so the MPI / PMIx threads
 * inherit the mask) and one signal thread watches them through a signalfd: it sees a signal while it
 * is still pending, sets the server's draining flag, and only then takes it. So there is no instant at
 * which a sent signal is neither pending (the HTTP threads check sigpending) nor recorded in the
 * flag -- with a handler, the thread that took the signal could be descheduled before storing it. */
static volatile sig_atomic_t g_stop;
static sits_server_t *_Atomic g_srv;

static void on_signal(int sig)
{
    (void)sig;
    if (g_stop < 2) g_stop++;
    sits_server_t *srv = atomic_load(&g_srv);
    if (srv) sits_server_drain_signal(srv);
}

static void drain_signals_set(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGINT);
}

/* The signal thread: wait until SIGTERM / SIGINT is pending, record it, then dequeue it. */
static void *signal_main(void *arg)
{
    int fd = *(int *)arg;
    for (;;) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (poll(&p, 1, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        sits_server_t *srv = atomic_load(&g_srv);
        if (srv) sits_server_drain_signal(srv);   /* first: the signal is still pending */
        struct signalfd_siginfo si;
        if (read(fd, &si, sizeof si) != (ssize_t)sizeof si) continue;
        if (g_stop < 2) g_stop++;
    }
    return NULL;
}

typedef struct {
    int fd;
    int started;
    pthread_t thread;
} signal_watch_t;

/* Serve mode: the signal thread (the signals are blocked since sits_cli_main). The handler stays as a
 * fallback for a thread some library started with them unblocked. */
static void signal_watch_start(signal_watch_t *w)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigset_t set;
    drain_signals_set(&set);
    w->started = 0;
    w->fd = signalfd(-1, &set, SFD_CLOEXEC);
    if (w->fd < 0 || pthread_create(&w->thread, NULL, signal_main, &w->fd) != 0) {
        SITS_WARN(SITS_SUB_INIT, "no signal thread (%s): SIGTERM / SIGINT go to the handler", strerror(errno));
        if (w->fd >= 0) close(w->fd);
        w->fd = -1;
        pthread_sigmask(SIG_UNBLOCK, &set, NULL);
        return;
    }
    w->started = 1;
}

static void signal_watch_stop(signal_watch_t *w)
{
    if (!w->started) return;
    pthread_cancel(w->thread);   /* poll is a cancellation point */
    pthread_join(w->thread, NULL);
    close(w->fd);
    w->started = 0;
}

static void stop_admitting(void *srv) { sits_server_stop_admitting(srv); }

/* The drain is over (every admitted request finished, or ended "abort" at --shutdown-timeout): let
 * the clients receive their whole responses before the ranks and the server stop (not after a
 * second signal). */
static void deliver_replies(void *srv)
{
    double until = now_s() + REPLY_GRACE_S;
    while (g_stop < 2 && sits_server_inflight(srv) > 0 && now_s() < until) {
        struct timespec ts = { 0, 10 * 1000000L };
        nanosleep(&ts, NULL);
    }
    if (sits_server_inflight(srv) > 0)
        SITS_WARN(SITS_SUB_HTTP, "stopping with %d responses not completely sent", sits_server_inflight(srv));
}

/* Serve mode: the leader runs the HTTP server and the scheduler; the other ranks follow its plans. */
static int run_serve(const sits_config_t *cfg, const sits_layout_t *L, int rank, int world)
{
    int rc = 1;
    sits_status_t st = SITS_OK;
    sits_rank_t k;
    memset(&k, 0, sizeof k);
    sits_runner_t *r = NULL;
    sits_backend_t *be = NULL;
    sits_tokenizer_t *tok = NULL;
    sits_chat_t *chat = NULL;
    sits_gen_defaults_t gen = { 0 };
    sits_sched_t *sched = NULL;
    sits_server_t *srv = NULL;
    sits_tenants_t tenants;
    sits_tenants_default(&tenants);
    FILE *trace = NULL;
    sits_spec_config_t spec = { 0 };   /* [speculative] parsed on the leader */
    sits_runner_t *draft = NULL;       /* [speculative] the draft model (draft_model) */
    sits_comm_t *draft_comm = NULL;
    sits_otlp_t *otlp = NULL;
    int D = L->disagg_p ? 2 : L->pl->dp;   /* [kv move] --disaggregate: the prefill and the decode group */
    sits_sched_t *scheds[SITS_TOPO_MAX_GPUS] = { NULL };
    sits_runner_t *shadows[SITS_TOPO_MAX_GPUS] = { NULL };
    sits_router_t *router = NULL;
    if (cfg->max_num_seqs < 1 || cfg->max_num_batched_tokens < 1 || cfg->max_waiting < 1 || cfg->port < 0 || cfg->port > 65535) {
        if (rank == 0) fprintf(stderr, "sits-dist: need --max-num-seqs, --max-num-batched-tokens, --max-waiting >= 1 and 0 <= --port <= 65535\n");
        return EXIT_USAGE;
    }
    if (cfg->max_num_batched_tokens < cfg->max_num_seqs) {   /* before anything loads (a decode step is one token a sequence) */
        if (rank == 0) fprintf(stderr, "sits-dist: --max-num-batched-tokens (%lld) must be at least --max-num-seqs (%lld)\n",
                               (long long)cfg->max_num_batched_tokens, (long long)cfg->max_num_seqs);
        return EXIT_USAGE;
    }
    signal_watch_t sigw;
    signal_watch_start(&sigw);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN);   /* [kv offload] a file-size limit fails the disk tier's write (EFBIG), it does not kill the rank */

    sits_runner_params_t rp = {
        .max_seqs = (int)cfg->max_num_seqs, .max_tokens = (int)cfg->max_num_batched_tokens,
        .max_model_len = (int)cfg->max_model_len, .block_size = (int)cfg->block_size, .kv_bytes = cfg->kv_cache_memory,
        .no_cuda_graphs = !cfg->cuda_graphs, .gpu_memory_utilization = cfg->gpu_memory_utilization,
        .host_kv_share = CPU_KV_SHARE, .host_ranks = L->pl->ranks[L->pl->self].local_size,
    };
    if (L->disagg_p || L->pl->dp > 1) {   /* [kv move] the staging of KV moves, in the memory plan */
        rp.kv_move_bytes = cfg->kv_move_buffer > 0 ? cfg->kv_move_buffer : 1;
        rp.kv_move_tp[0] = L->disagg_p ? L->disagg_p : L->pl->tp;
        rp.kv_move_tp[1] = L->disagg_p ? L->disagg_d : L->pl->tp;
        rp.kv_move_pp = L->disagg_p ? 1 : L->pl->pp;
        rp.kv_move_ranks = L->pl->world_size;
    }
    double t0 = now_s();
    /* the text layer first: a tokenizer or chat template that cannot load is refused before the weights */
    if (rank == 0) {
        st = sits_tokenizer_load(cfg->model, &tok);
        if (st == SITS_OK) st = sits_chat_load(cfg->model, cfg->chat_template, &chat);
        if (st == SITS_OK) st = load_gen_defaults(cfg, &gen);
    }
    if ((st = agree(st, "tokenizer and chat template load", cfg->step_timeout)) != SITS_OK) {
        rc = st == SITS_ERR_INVALID ? EXIT_USAGE : 1;
        goto out;
    }
    st = rank_setup(cfg, L, &rp, &k);
    if (st != SITS_OK) {
        rc = st == SITS_ERR_INVALID ? EXIT_USAGE : 1;
        goto out;
    }
    r = k.r;
    be = k.be;
    int kv_offload = 0;
    st = make_offload(cfg, be, rank, r, &kv_offload);
    if (agree(st, "kv offload set-up", cfg->step_timeout) != SITS_OK) {
        rc = st == SITS_ERR_INVALID ? EXIT_USAGE : 1;
        goto out;
    }
    if (rank == 0) {
        if (cfg->tenants) {
            if (cfg->api_key) {
                SITS_ERROR(SITS_SUB_INIT, "--api-key and --tenants do not go together: put the keys in the tenants file");
                st = SITS_ERR_INVALID;
            } else {
                sits_tenants_free(&tenants);
                st = sits_tenants_load(cfg->tenants, &tenants);
            }
        }
        char spec_err[256];
        if (st == SITS_OK && sits_spec_config_parse(cfg->speculative_config, &spec, spec_err, sizeof spec_err) != SITS_OK) {
            SITS_ERROR(SITS_SUB_INIT, "%s", spec_err);   /* [speculative] */
            st = SITS_ERR_INVALID;
        }
        if (st == SITS_OK && spec.method == SITS_SPEC_DRAFT) st = make_draft_runner(cfg, &spec, be, r, &draft_comm, &draft);
        if (st == SITS_OK && cfg->trace_file && !(trace = fopen(cfg->trace_file, "a"))) {
            SITS_ERROR(SITS_SUB_INIT, "cannot open --trace-file %s", cfg->trace_file);
            st = SITS_ERR_IO;
        }
        if (st == SITS_OK && cfg->otlp_endpoint && cfg->otlp_endpoint[0])
            st = sits_otlp_create(cfg->otlp_endpoint, "sits-dist", 1.0, &otlp);
        if (st == SITS_OK) {
            sits_sched_params_t sp = { .max_num_seqs = (int)cfg->max_num_seqs,
                                       .max_num_batched_tokens = (int)cfg->max_num_batched_tokens,
                                       .max_waiting = (int)cfg->max_waiting, .drain_timeout_s = cfg->shutdown_timeout,
                                       .prefix_caching = cfg->prefix_caching,
                                       .target_tpot_p99_ms = cfg->target_tpot_p99_ms,
                                       .controller_interval_s = cfg->controller_interval > 0 ? cfg->controller_interval : 0.1,
                                       .tenants = &tenants, .trace = trace, .otlp = otlp,
                                       .kv_offload = kv_offload, .kv_offload_threshold = cfg->kv_offload_threshold,
                                       .kv_migrate_threshold = cfg->kv_migrate_threshold,
                                       .kv_migrate_every = (int)cfg->kv_migrate_every,
                                       .kv_migrate_corrupt_every = (int)cfg->kv_migrate_corrupt_every, .spec = spec,
                                       .spec_draft = draft };
            st = sits_sched_create(&sp, r, &sched);
            scheds[0] = sched;
            /* data parallelism: a scheduler per remote replica, driving it through a shadow runner */
            for (int q = 1; st == SITS_OK && q < D; q++) {
                st = sits_runner_create_shadow(r, k.inst.remote[q], k.inst.remote_root[q], &shadows[q]);
                if (st == SITS_OK) st = sits_sched_create(&sp, shadows[q], &scheds[q]);
            }
            if (st == SITS_OK && D > 1) st = sits_router_create(scheds, D, &router);
            /* [kv move] each replica's TP / pipeline sizes and world ranks [stage][tp rank], for KV moves */
            int32_t *wr = D > 1 ? malloc(sizeof(int32_t) * (size_t)world) : NULL;
            if (D > 1 && !wr) st = SITS_ERR_NOMEM;
            for (int q = 0; st == SITS_OK && D > 1 && q < D; q++) {
                int P = L->disagg_p, tp = P ? (q == 0 ? P : L->disagg_d) : L->pl->tp, pp = P ? 1 : L->pl->pp;
                for (int a = 0; a < pp; a++)
                    for (int b = 0; b < tp; b++) wr[a * tp + b] = P ? (q == 0 ? b : P + b) : sits_topo_layout_rank(L->pl, q, a, b);
                st = sits_sched_set_replica(scheds[q], P ? (q == 0 ? SITS_SCHED_PREFILL : SITS_SCHED_DECODE) : SITS_SCHED_REPLICA,
                                            tp, pp, wr);
            }
            free(wr);
        }
        if (st == SITS_OK) {
            const char *name = cfg->served_model_name;
            if (!name) {
                name = strrchr(cfg->model, '/');
                name = name && name[1] ? name + 1 : cfg->model;
            }
            sits_server_params_t hp = {
                .host = cfg->host, .port = (int)cfg->port, .api_key = cfg->api_key, .model_name = name,
                .tenants = cfg->tenants ? &tenants : NULL,
                .max_model_len = r->max_model_len, .vocab_size = r->cfg.vocab_size,
                .max_body_bytes = (size_t)cfg->max_body_bytes, .chat = chat, .gen = gen,
                .seed = cfg->seed >= 0 ? (uint64_t)cfg->seed : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20),
                .otlp = otlp, .max_connections = (int)cfg->max_connections,
                .max_connections_per_client = (int)cfg->max_connections_per_client,
                .http_threads = (int)cfg->http_threads, .read_timeout_s = cfg->request_read_timeout,
                .drain_signals = 1, .tool_call_parser = cfg->tool_call_parser,
                .reasoning_parser = cfg->reasoning_parser,
            };
            st = router ? sits_server_create(&hp, tok, &sits_router_api, router, &srv)
                        : sits_server_create(&hp, tok, &sits_sched_api, sched, &srv);
        }
    }
    if (agree(st, "server start", cfg->step_timeout) != SITS_OK) goto out;
    if (rank == 0) {
        atomic_store(&g_srv, srv);
        if (g_stop) sits_server_drain_signal(srv);   /* a signal during start-up */
        const char *host = cfg->host ? cfg->host : "127.0.0.1";
        int port = sits_server_port(srv);
        char lay[96];
        if (L->disagg_p) snprintf(lay, sizeof lay, "prefill tp %d -> decode tp %d (disaggregated)", L->disagg_p, L->disagg_d);
        else snprintf(lay, sizeof lay, "tp %d x pp %d x dp %d", L->pl->tp, L->pl->pp, D);
        fprintf(stderr,
                "sits-dist: serving %s on http://%s:%d (%d rank%s: %s, %s backend, %d KV blocks of %d tokens a replica, loaded in %.1f s)\n"
                "try:\n  curl http://%s:%d/v1/chat/completions -H 'Content-Type: application/json'%s -d "
                "'{\"model\": \"%s\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello!\"}], \"max_tokens\": 32}'\n",
                cfg->model, host, port, world, world > 1 ? "s" : "", lay, be->ops->name, r->ep.n_blocks,
                r->ep.block_size,
                now_s() - t0, host, port, cfg->api_key ? " -H 'Authorization: Bearer $SITS_API_KEY'" : "",
                cfg->served_model_name ? cfg->served_model_name : (strrchr(cfg->model, '/') && strrchr(cfg->model, '/')[1] ? strrchr(cfg->model, '/') + 1 : cfg->model));
        st = sits_sched_run_many(scheds, D, &g_stop, stop_admitting, deliver_replies, srv);
        atomic_store(&g_srv, NULL);
        sits_server_destroy(srv);
        srv = NULL;
        fprintf(stderr, "sits-dist: stopped\n");
    } else {
        st = sits_worker_follow(r, 1);
    }
    rc = st == SITS_OK ? 0 : 1;
out:
    sits_server_destroy(srv);
    sits_router_destroy(router);
    for (int q = 1; q < D; q++) {
        sits_sched_destroy(scheds[q]);
        sits_runner_destroy(shadows[q]);
    }
    sits_sched_destroy(sched);
    sits_runner_destroy(draft);   /* [speculative] after the schedulers that used it */
    sits_comm_destroy(draft_comm);
    sits_otlp_destroy(otlp);   /* after the schedulers: posts the last finished requests */
    sits_tenants_free(&tenants);
    if (trace) fclose(trace);
    sits_chat_destroy(chat);
    sits_tokenizer_destroy(tok);
    rank_fini(&k);
    signal_watch_stop(&sigw);
    return rc;
}

/* OpenMP threads that spin at barriers lose whole time slices when a core is busy elsewhere (measured
 * on the 2-core CI machine with two other busy processes: 159 ms a decode step with 2 spinning
 * threads, 0.4 ms with passive ones). libgomp reads OMP_WAIT_POLICY once, before main: when the user
 * did not set it, run this same program again with it set to passive (before MPI_Init, so the launcher
 * sees one process; the pid stays). Returns only when nothing was re-executed. */
static void omp_passive_reexec(char **argv)
{
    if (getenv("OMP_WAIT_POLICY") || getenv("SITS_OMP_REEXEC")) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0 || setenv("SITS_OMP_REEXEC", "1", 1) != 0) return;
    execv("/proc/self/exe", argv);
    unsetenv("OMP_WAIT_POLICY");   /* exec failed: go on as we are */
}

static void set_log_level(const sits_config_t *cfg)
{
    static const char *const names[] = { "none", "error", "warn", "info", "debug", "trace" };
    for (int i = 0; cfg->log_level && i < 6; i++)
        if (!strcasecmp(cfg->log_level, names[i])) sits_log_set_level((sits_log_level_t)i);
}

/* [gguf] --model FILE.gguf (or a directory whose one GGUF has no config.json): the config, tokenizer and chat
 * template rebuilt from its metadata into a private directory (model/gguf.h sits_gguf_model_dir), which --model then
 * names; the served model name stays the file's (without .gguf) unless --served-model-name gives one. */
static sits_status_t resolve_gguf(sits_config_t *cfg)
{
    char *dir = NULL;
    sits_status_t st = sits_gguf_model_dir(cfg->model, &dir);
    if (st != SITS_OK) {
        fprintf(stderr, "sits-dist: cannot serve %s on its own (see the log above)\n", cfg->model);
        return st;
    }
    if (!dir) return SITS_OK;
    if (!cfg->served_model_name || !cfg->served_model_name[0]) {
        const char *b = strrchr(cfg->model, '/');
        b = b && b[1] ? b + 1 : cfg->model;
        size_t n = strlen(b);
        if (n > 5 && !strcmp(b + n - 5, ".gguf")) n -= 5;
        free(cfg->served_model_name);
        cfg->served_model_name = strndup(b, n);
    }
    free(cfg->model);
    cfg->model = dir;
    return SITS_OK;
}

/* --render-chat, --tokenize, --detokenize read files and print: no MPI needed. They run before MPI_Init
 * (on rank 0 of a launched job; the other ranks exit 0), so their exit never goes through MPI's teardown
 * (an Open MPI singleton's finalize once crashed in libgcc_s' unwinder under load). Returns -1 when none
 * of them is asked for, else the exit code. */
static int run_text_mode(int argc, char **argv)
{
    int want = 0;
    static const char *const modes[] = { "--render-chat", "--tokenize", "--detokenize" };
    for (int i = 1; i < argc; i++)
        for (int m = 0; m < 3; m++) {
            size_t l = strlen(modes[m]);
            if (!strncmp(argv[i], modes[m], l) && (argv[i][l] == 0 || argv[i][l] == '=')) want = 1;
        }
    if (!want) return -1;
    const char *r = getenv("OMPI_COMM_WORLD_RANK");
    if (!r) r = getenv("PMIX_RANK");
    if (!r) r = getenv("PMI_RANK");
    if (r && atoi(r) != 0) return 0;
    sits_log_init(0);
    sits_config_t cfg;
    char err[512];
    if (sits_config_parse(argc, argv, &cfg, err, sizeof err) != SITS_OK) {
        fprintf(stderr, "sits-dist: %s\n", err);
        return EXIT_USAGE;
    }
    set_log_level(&cfg);
    int rc;
    if (resolve_gguf(&cfg) != SITS_OK) {
        rc = 1;
    } else if (!cfg.model) {
        fprintf(stderr, "sits-dist: --model DIR is required (see --help)\n");
        rc = EXIT_USAGE;
    } else {
        rc = cfg.render_chat ? run_render_chat(&cfg) : run_tokenizer_mode(&cfg);
    }
    sits_config_free(&cfg);
    return rc;
}

/* [faults] MPI start-up with a deadline: Open MPI's MPI_Init waits in its PMIx fence for every rank with no
 * limit, so a peer stopped or lost before it returns would hang the job there. A watchdog thread, started before
 * MPI_Init, ends this rank with a message once --startup-timeout seconds pass without MPI_Init returning; mpirun /
 * srun then end the others. The flags are parsed once before MPI_Init for it (quietly: errors are reported after). */
static atomic_int g_mpi_init_done;

static void *startup_watchdog(void *arg)
{
    const double limit = *(const double *)arg, t0 = now_s();
    while (!atomic_load(&g_mpi_init_done)) {
        if (now_s() - t0 > limit) {
            fprintf(stderr, "sits-dist: MPI start-up did not complete within %.1f s (--startup-timeout): a peer rank is stalled "
                            "or dead\n", limit);
            _exit(1);
        }
        usleep(50000);
    }
    return NULL;
}

static void startup_watchdog_start(int argc, char **argv)
{
    static double limit;
    sits_config_t pre;
    char err[256];
    char **args = calloc((size_t)argc + 1, sizeof *args);
    int n = 0;
    if (!args) return;
    for (int i = 0; i < argc; i++)
        if (i == 0 || strcmp(argv[i], "--print-config")) args[n++] = argv[i];
    limit = 300.0;
    if (sits_config_parse(n, args, &pre, err, sizeof err) == SITS_OK) {
        limit = pre.startup_timeout;
        sits_config_free(&pre);
    }
    free(args);
    pthread_t t;
    if (limit > 0 && pthread_create(&t, NULL, startup_watchdog, &limit) == 0) pthread_detach(t);
}

int sits_cli_main(int argc, char **argv)
{
    omp_passive_reexec(argv);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { print_help(stdout); return 0; }
        if (!strcmp(argv[i], "--version")) { printf("sits-dist %s\n", PACKAGE_VERSION); return 0; }
        if (!strcmp(argv[i], "--help-man")) { sits_config_print_man(PACKAGE_VERSION, stdout); return 0; }
    }
    int text_rc = run_text_mode(argc, argv);
    if (text_rc >= 0) return text_rc;
    /* SIGTERM / SIGINT blocked before MPI_Init: every thread started from here on inherits the mask
     * (see signal_watch_start); modes other than serve unblock them again in this thread below */
    sigset_t drain_set, old_mask;
    drain_signals_set(&drain_set);
    pthread_sigmask(SIG_BLOCK, &drain_set, &old_mask);
    int provided = 0;
    startup_watchdog_start(argc, argv);   /* [faults] */
    const int init_rc = MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    atomic_store(&g_mpi_init_done, 1);
    if (init_rc != MPI_SUCCESS) {
        fprintf(stderr, "sits-dist: MPI_Init_thread failed\n");
        return 1;
    }
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    sits_log_init(rank);

    int print_config = 0, n_args = 0;
    char **args = calloc((size_t)argc + 1, sizeof *args);
    if (!args) { MPI_Finalize(); return 1; }
    for (int i = 0; i < argc; i++) {
        if (i > 0 && !strcmp(argv[i], "--print-config")) { print_config = 1; continue; }
        args[n_args++] = argv[i];
    }
    sits_config_t cfg;
    char err[512];
    int rc;
    if (sits_config_parse(n_args, args, &cfg, err, sizeof err) != SITS_OK) {
        if (rank == 0) fprintf(stderr, "sits-dist: %s\n", err);
        free(args);
        MPI_Finalize();
        return EXIT_USAGE;
    }
    free(args);
    set_log_level(&cfg);
    sits_config_log_nondefaults(&cfg);
    if (resolve_gguf(&cfg) != SITS_OK) {
        sits_config_free(&cfg);
        MPI_Finalize();
        return 1;
    }
    if (print_config || (!cfg.model && !cfg.topology) || cfg.topology || cfg.prompt || cfg.prompt_ids)
        pthread_sigmask(SIG_SETMASK, &old_mask, NULL);   /* not serving: the default actions */
    if (print_config) {
        if (rank == 0) sits_config_print(&cfg, stdout);
        rc = 0;
    } else if (!cfg.model && !cfg.topology) {
        if (rank == 0) fprintf(stderr, "sits-dist: --model DIR is required (see --help)\n");
        rc = EXIT_USAGE;
    } else {
        sits_layout_t L;
        sits_status_t st = layout_init(&cfg, &L);
        if (st != SITS_OK) rc = st == SITS_ERR_INVALID ? EXIT_USAGE : 1;
        else if (cfg.topology) {
            rc = sits_topo_report(MPI_COMM_WORLD, L.topo, L.pl, !strcmp(cfg.topology, "json"), stdout) == SITS_OK ? 0 : 1;
            if (rank == 0) fflush(stdout);
        } else if (cfg.prompt || cfg.prompt_ids) {
            rc = run_offline(&cfg, &L, rank, world);
        } else {
            rc = run_serve(&cfg, &L, rank, world);
        }
        layout_fini(&L);
    }
    sits_config_free(&cfg);
    MPI_Finalize();
    return rc;
}
