/* report.c -- the `--topology` map: one JSON record per rank (host, GPU, NVLink peers, NUMA,
 * cores), gathered to rank 0, assembled with the group layout, printed as text or JSON.
 * The JSON document:
 *   { world_size, tp, pp, dp, n_nodes,
 *     nodes: [{node, host, packages, numa_nodes, cores, gpus, nvlink_source, ranks: [..]}],
 *     ranks: [{rank, host, node, local_rank, local_size, slot, tp_rank, pp_rank, dp_rank,
 *              gpu: null | {index, pci_bus_id, name, nvlink: [{gpu, pci_bus_id, gbps, via}]},
 *              numa: os index | null, cores: {first, count, pus}, shared}],
 *     groups: {tp: [[world ranks]..], pp: [..], dp: [..]} } */
#include <stdlib.h>
#include <string.h>
#include "topology/topology.h"
#include "util/check.h"
#include "util/log.h"

#define JSET(obj_, key_, val_) json_object_set_new((obj_), (key_), (val_))

sits_status_t sits_topo_report_record(const sits_topo_t *topo, const sits_placement_t *pl, int world_rank,
                                      json_t **rec_p)
{
    const sits_topo_rank_t *r;
    const sits_topo_node_info_t *ni = sits_topo_node_info(topo);
    char pus[1024];
    json_t *rec, *node, *cores, *gpu = json_null();

    if (world_rank < 0 || world_rank >= pl->world_size)
        return SITS_ERR_INVALID;
    r = &pl->ranks[world_rank];
    rec = json_object();
    if (!rec)
        return SITS_ERR_NOMEM;
    JSET(rec, "rank", json_integer(world_rank));
    JSET(rec, "host", json_string(sits_topo_hostname(topo)));
    JSET(rec, "node", json_integer(r->node));
    JSET(rec, "local_rank", json_integer(r->local_rank));
    JSET(rec, "local_size", json_integer(r->local_size));
    JSET(rec, "slot", json_integer(r->slot));
    JSET(rec, "tp_rank", json_integer(r->tp_rank));
    JSET(rec, "pp_rank", json_integer(r->pp_rank));
    JSET(rec, "dp_rank", json_integer(r->dp_rank));

    const sits_topo_gpu_t *g = sits_topo_gpu(topo, r->gpu);
    if (g) {
        json_t *peers = json_array();
        gpu = json_object();
        JSET(gpu, "index", json_integer(r->gpu));
        JSET(gpu, "pci_bus_id", json_string(g->busid));
        JSET(gpu, "name", json_string(g->name));
        for (int p = 0; p < sits_topo_gpu_count(topo); p++) {
            int via = 0;
            double bw = sits_topo_nvlink_gbps(topo, r->gpu, p, &via);
            if (p == r->gpu || bw <= 0.0)
                continue;
            json_t *e = json_object();
            JSET(e, "gpu", json_integer(p));
            JSET(e, "pci_bus_id", json_string(sits_topo_gpu(topo, p)->busid));
            JSET(e, "gbps", json_real(bw));
            JSET(e, "via", json_string(via ? "nvswitch" : "direct"));
            json_array_append_new(peers, e);
        }
        JSET(gpu, "nvlink", peers);
    }
    JSET(rec, "gpu", gpu);
    JSET(rec, "numa", r->numa >= 0 && r->numa < ni->n_numa && ni->numa_os[r->numa] >= 0
                          ? json_integer(ni->numa_os[r->numa]) : json_null());
    cores = json_object();
    JSET(cores, "first", json_integer(r->core_first));
    JSET(cores, "count", json_integer(r->n_cores));
    if (r->n_cores <= 0 || sits_topo_cores_pus(topo, r->core_first, r->n_cores, pus, sizeof(pus)) != SITS_OK)
        pus[0] = '\0';
    JSET(cores, "pus", json_string(pus));
    JSET(rec, "cores", cores);
    JSET(rec, "shared", json_boolean(r->shared));
    node = json_object();
    JSET(node, "packages", json_integer(sits_topo_package_count(topo)));
    JSET(node, "numa_nodes", json_integer(ni->n_numa));
    JSET(node, "cores", json_integer(ni->n_cores));
    JSET(node, "gpus", json_integer(ni->n_gpus));
    JSET(node, "nvlink_source", json_string(sits_topo_nvlink_source(topo)));
    JSET(rec, "node_info", node);
    *rec_p = rec;
    return SITS_OK;
}

static json_t *groups_json(const sits_placement_t *pl, sits_topo_group_t kind)
{
    int n = sits_topo_group_count(pl, kind), size = sits_topo_group_size(pl, kind);
    int *members = malloc((size_t)size * sizeof(*members));
    json_t *arr = json_array();
    if (!members)
        return arr;
    for (int c = 0; c < n; c++) {
        /* find a member of group c, then list the group */
        for (int w = 0; w < pl->world_size; w++) {
            int color;
            sits_topo_group_of(pl, kind, w, &color, NULL, NULL);
            if (color != c)
                continue;
            sits_topo_group_of(pl, kind, w, NULL, NULL, members);
            json_t *g = json_array();
            for (int i = 0; i < size; i++)
                json_array_append_new(g, json_integer(members[i]));
            json_array_append_new(arr, g);
            break;
        }
    }
    free(members);
    return arr;
}

sits_status_t sits_topo_report_doc(const sits_placement_t *pl, json_t *const *records, json_t **doc_p)
{
    json_t *doc = json_object(), *ranks = json_array(), *nodes = json_array(), *groups = json_object();
    if (!doc || !ranks || !nodes || !groups) {
        json_decref(doc);
        json_decref(ranks);
        json_decref(nodes);
        json_decref(groups);
        return SITS_ERR_NOMEM;
    }
    JSET(doc, "world_size", json_integer(pl->world_size));
    JSET(doc, "tp", json_integer(pl->tp));
    JSET(doc, "pp", json_integer(pl->pp));
    JSET(doc, "dp", json_integer(pl->dp));
    JSET(doc, "n_nodes", json_integer(pl->n_nodes));
    for (int n = 0; n < pl->n_nodes; n++) {
        json_t *node = json_object(), *members = json_array();
        JSET(node, "node", json_integer(n));
        for (int s = 0; s < pl->world_size; s++) {
            int w = pl->slot_rank[s];
            if (pl->ranks[w].node != n)
                continue;
            json_array_append_new(members, json_integer(w));
            if (json_array_size(members) == 1 && records[w]) {
                json_t *info = json_object_get(records[w], "node_info");
                json_object_set(node, "host", json_object_get(records[w], "host"));
                if (info)
                    json_object_update(node, info);
            }
        }
        JSET(node, "ranks", members);
        json_array_append_new(nodes, node);
    }
    for (int w = 0; w < pl->world_size; w++)
        json_array_append(ranks, records[w] ? records[w] : json_null());
    JSET(groups, "tp", groups_json(pl, SITS_TOPO_GROUP_TP));
    JSET(groups, "pp", groups_json(pl, SITS_TOPO_GROUP_PP));
    JSET(groups, "dp", groups_json(pl, SITS_TOPO_GROUP_DP));
    JSET(doc, "nodes", nodes);
    JSET(doc, "ranks", ranks);
    JSET(doc, "groups", groups);
    *doc_p = doc;
    return SITS_OK;
}

static const char *jstr(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

static long jint(const json_t *o, const char *key)
{
    return (long)json_integer_value(json_object_get(o, key));
}

/* "nvlink: 450 GB/s to gpus 1,2,3 via nvswitch; 25 GB/s to gpu 4 direct" */
static void print_nvlink(FILE *out, const json_t *peers)
{
    size_t n = json_array_size(peers);
    char done[SITS_TOPO_MAX_GPUS] = {0};
    if (n == 0) {
        fprintf(out, "      nvlink: none\n");
        return;
    }
    fprintf(out, "      nvlink:");
    for (size_t i = 0; i < n && i < SITS_TOPO_MAX_GPUS; i++) {
        if (done[i])
            continue;
        const json_t *p = json_array_get(peers, i);
        double bw = json_real_value(json_object_get(p, "gbps"));
        const char *via = jstr(p, "via");
        fprintf(out, "%s %.0f GB/s to gpu", i ? ";" : "", bw);
        for (size_t j = i, k = 0; j < n && j < SITS_TOPO_MAX_GPUS; j++) {
            const json_t *q = json_array_get(peers, j);
            if (done[j] || json_real_value(json_object_get(q, "gbps")) != bw || strcmp(jstr(q, "via"), via) != 0)
                continue;
            done[j] = 1;
            fprintf(out, "%s%ld", k++ ? "," : " ", jint(q, "gpu"));
        }
        fprintf(out, " (%s)", via);
    }
    fprintf(out, "\n");
}

void sits_topo_report_text(FILE *out, const json_t *doc)
{
    const json_t *nodes = json_object_get(doc, "nodes"), *ranks = json_object_get(doc, "ranks");
    const json_t *groups = json_object_get(doc, "groups");
    size_t i;
    const json_t *v;

    fprintf(out, "topology: %ld ranks on %ld node%s: tp %ld x pp %ld x dp %ld\n", jint(doc, "world_size"),
            jint(doc, "n_nodes"), jint(doc, "n_nodes") == 1 ? "" : "s", jint(doc, "tp"), jint(doc, "pp"),
            jint(doc, "dp"));
    json_array_foreach(nodes, i, v) {
        fprintf(out, "node %ld %s: %ld package%s, %ld numa node%s, %ld cores, %ld gpu%s, nvlink from %s; ranks",
                jint(v, "node"), jstr(v, "host"), jint(v, "packages"), jint(v, "packages") == 1 ? "" : "s",
                jint(v, "numa_nodes"), jint(v, "numa_nodes") == 1 ? "" : "s", jint(v, "cores"), jint(v, "gpus"),
                jint(v, "gpus") == 1 ? "" : "s", jstr(v, "nvlink_source"));
        size_t k;
        const json_t *m;
        json_array_foreach(json_object_get(v, "ranks"), k, m)
            fprintf(out, " %lld", (long long)json_integer_value(m));
        fprintf(out, "\n");
    }
    json_array_foreach(ranks, i, v) {
        if (!json_is_object(v)) {
            fprintf(out, "rank %zu: no report\n", i);
            continue;
        }
        const json_t *gpu = json_object_get(v, "gpu"), *cores = json_object_get(v, "cores");
        const json_t *numa = json_object_get(v, "numa");
        fprintf(out, "rank %ld: host %s local %ld/%ld, ", jint(v, "rank"), jstr(v, "host"), jint(v, "local_rank"),
                jint(v, "local_size"));
        if (json_is_object(gpu)) {
            fprintf(out, "gpu %ld %s", jint(gpu, "index"), jstr(gpu, "pci_bus_id"));
            if (jstr(gpu, "name")[0])
                fprintf(out, " (%s)", jstr(gpu, "name"));
        } else {
            fprintf(out, "no gpu");
        }
        if (json_is_integer(numa))
            fprintf(out, ", numa %lld", (long long)json_integer_value(numa));
        else
            fprintf(out, ", numa -");
        if (jint(cores, "count") == 1)
            fprintf(out, ", core %ld (pus %s)", jint(cores, "first"), jstr(cores, "pus"));
        else if (jint(cores, "count") > 1)
            fprintf(out, ", cores %ld-%ld (pus %s)", jint(cores, "first"),
                    jint(cores, "first") + jint(cores, "count") - 1, jstr(cores, "pus"));
        if (jint(cores, "count") > 0 && json_is_true(json_object_get(v, "shared")))
            fprintf(out, " shared: oversubscribed");
        else if (jint(cores, "count") <= 0)
            fprintf(out, ", cores unknown");
        fprintf(out, ", tp %ld pp %ld dp %ld\n", jint(v, "tp_rank"), jint(v, "pp_rank"), jint(v, "dp_rank"));
        if (json_is_object(gpu))
            print_nvlink(out, json_object_get(gpu, "nvlink"));
    }
    static const char *const kinds[3] = {"tp", "pp", "dp"};
    for (int k = 0; k < 3; k++) {
        const json_t *arr = json_object_get(groups, kinds[k]), *g;
        fprintf(out, "%s groups (%zu):", kinds[k], json_array_size(arr));
        json_array_foreach(arr, i, g) {
            size_t j;
            const json_t *m;
            fprintf(out, " [");
            json_array_foreach(g, j, m)
                fprintf(out, "%s%lld", j ? " " : "", (long long)json_integer_value(m));
            fprintf(out, "]");
        }
        fprintf(out, "\n");
    }
}

void sits_topo_report_json(FILE *out, const json_t *doc)
{
    json_dumpf(doc, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    fputc('\n', out);
}

sits_status_t sits_topo_report(MPI_Comm comm, const sits_topo_t *topo, const sits_placement_t *pl, int json,
                               FILE *out)
{
    sits_status_t st = SITS_OK;
    int rank, size, len = 0;
    char *text = NULL, *all = NULL;
    int *lens = NULL, *displs = NULL;
    json_t *rec = NULL, **records = NULL, *doc = NULL;

    SITS_MPI_CHECK(MPI_Comm_rank(comm, &rank));
    SITS_MPI_CHECK(MPI_Comm_size(comm, &size));
    if (size != pl->world_size) {
        SITS_ERROR(SITS_SUB_TOPO, "report over %d ranks of a placement of %d", size, pl->world_size);
        return SITS_ERR_INVALID;
    }
    /* a rank that fails to describe itself still joins the collectives, with an empty record */
    if (sits_topo_report_record(topo, pl, rank, &rec) == SITS_OK)
        text = json_dumps(rec, JSON_COMPACT | JSON_PRESERVE_ORDER);
    len = text ? (int)strlen(text) + 1 : 0;
    if (rank == 0) {
        lens = calloc((size_t)size, sizeof(*lens));
        displs = calloc((size_t)size, sizeof(*displs));
    }
    SITS_MPI_CHECK_GOTO(MPI_Gather(&len, 1, MPI_INT, lens, 1, MPI_INT, 0, comm), st, out);
    if (rank == 0) {
        long total = 0;
        for (int r = 0; r < size; r++) {
            displs[r] = (int)total;
            total += lens[r];
        }
        all = malloc((size_t)total + 1);
        records = calloc((size_t)size, sizeof(*records));
    }
    SITS_MPI_CHECK_GOTO(MPI_Gatherv(text, len, MPI_CHAR, all, lens, displs, MPI_CHAR, 0, comm), st, out);
    if (rank == 0) {
        if (!all || !records) {
            st = SITS_ERR_NOMEM;
            goto out;
        }
        for (int r = 0; r < size; r++)
            if (lens[r] > 0)
                records[r] = json_loads(all + displs[r], 0, NULL);
        SITS_CHECK_GOTO(sits_topo_report_doc(pl, records, &doc), st, out);
        if (json)
            sits_topo_report_json(out, doc);
        else
            sits_topo_report_text(out, doc);
        fflush(out);
    }
out:
    if (records)
        for (int r = 0; r < size; r++)
            json_decref(records[r]);
    free(records);
    json_decref(doc);
    json_decref(rec);
    free(text);
    free(all);
    free(lens);
    free(displs);
    return st;
}
