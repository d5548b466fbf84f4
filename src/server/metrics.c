/* metrics.c -- the server's counters and latency histograms, and /metrics in the Prometheus text
 * exposition format (version 0.0.4): HELP and TYPE lines, cumulative `_bucket{le=...}` series ending
 * in le="+Inf", then `_sum` and `_count`.
 *
 * Server-measured: HTTP responses by status, requests finished by reason, time to first token
 * (request arrival -> first generated token received from the scheduler), inter-token latency, end to
 * end latency (arrival -> last token), prompt and generation tokens. From the scheduler (api->stats):
 * running / waiting / swapped sequences, KV blocks used / free, preemptions, step-time histogram.
 * Tokens that arrive together (one next() call returning n) count as n inter-token observations of
 * dt / n; the first token of a request is its TTFT, not an inter-token sample.
 * One mutex guards the counters; rendering copies them under it. */
#include "server/srv_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double ttft_le[] = { 0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                                  2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0 };
static const double itl_le[] = { 0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                                 0.75, 1.0, 2.5 };
static const double e2e_le[] = { 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                                 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0 };
/* sits_sched_stats_t.step_hist: <= 1,2,5,10,20,50,100,200,500,1000,2000 ms, +inf */
static const double step_le[] = { 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0 };

#define NLE(a_) ((int)(sizeof(a_) / sizeof((a_)[0])))

void sits_srv_metrics_init(sits_srv_metrics_t *m)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->ttft.le = ttft_le;
    m->ttft.n_le = NLE(ttft_le);
    m->itl.le = itl_le;
    m->itl.n_le = NLE(itl_le);
    m->e2e.le = e2e_le;
    m->e2e.n_le = NLE(e2e_le);
}

void sits_srv_metrics_fini(sits_srv_metrics_t *m)
{
    pthread_mutex_destroy(&m->mu);
}

static void hist_add(sits_srv_hist_t *h, double x, uint64_t times)
{
    int b = 0;
    while (b < h->n_le && x > h->le[b]) b++;
    h->counts[b] += times;
    h->count += times;
    h->sum += x * (double)times;
}

void sits_srv_metrics_status(sits_srv_metrics_t *m, int status)
{
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < m->n_status && m->status_code[i] != status) i++;
    if (i == m->n_status && i < SITS_SRV_MAX_STATUS) m->status_code[m->n_status++] = status;
    if (i < m->n_status) m->status_count[i]++;
    pthread_mutex_unlock(&m->mu);
}

void sits_srv_metrics_ttft(sits_srv_metrics_t *m, double s)
{
    pthread_mutex_lock(&m->mu);
    hist_add(&m->ttft, s, 1);
    pthread_mutex_unlock(&m->mu);
}

void sits_srv_metrics_itl(sits_srv_metrics_t *m, double dt, int n)
{
    if (n <= 0) return;
    pthread_mutex_lock(&m->mu);
    hist_add(&m->itl, dt / n, (uint64_t)n);
    pthread_mutex_unlock(&m->mu);
}

void sits_srv_metrics_done(sits_srv_metrics_t *m, double e2e_s, int n_prompt, int n_gen, sits_finish_t f, int tenant,
                           double ttft_s, double tpot_s)
{
    pthread_mutex_lock(&m->mu);
    if (tenant >= 0 && tenant < SITS_MAX_TENANTS) {
        m->t_requests[tenant]++;
        m->t_generation_tokens[tenant] += (uint64_t)n_gen;
        if (m->tenants && tenant < m->tenants->n) {
            const sits_tenant_t *t = &m->tenants->t[tenant];
            int ttft_ok = n_gen > 0 && (t->slo_ttft_ms <= 0 || ttft_s * 1e3 <= t->slo_ttft_ms);
            int tpot_ok = n_gen > 0 && (t->slo_tpot_ms <= 0 || tpot_s < 0 || tpot_s * 1e3 <= t->slo_tpot_ms);
            m->t_ttft_met[tenant] += (uint64_t)ttft_ok;
            m->t_tpot_met[tenant] += (uint64_t)tpot_ok;
            m->t_slo_met[tenant] += (uint64_t)(ttft_ok && tpot_ok);
        }
    }
    hist_add(&m->e2e, e2e_s, 1);
    m->prompt_tokens += (uint64_t)n_prompt;
    m->generation_tokens += (uint64_t)n_gen;
    if ((unsigned)f < 5) m->finish_count[f]++;
    pthread_mutex_unlock(&m->mu);
}

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} buf_t;

__attribute__((format(printf, 2, 3))) static void put(buf_t *b, const char *fmt, ...)
{
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = 1;
            return;
        }
        if ((size_t)k < b->cap - b->n) {
            b->n += (size_t)k;
            return;
        }
        size_t c = b->cap * 2 > b->n + (size_t)k + 1 ? b->cap * 2 : b->n + (size_t)k + 1;
        char *q = realloc(b->p, c);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = c;
    }
}

static void head(buf_t *b, const char *name, const char *type, const char *help)
{
    put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One unlabelled series with its HELP / TYPE lines. */
static void counter(buf_t *b, const char *name, const char *help, uint64_t v)
{
    head(b, name, "counter", help);
    put(b, "%s %llu\n", name, (unsigned long long)v);
}
static void gauge_i(buf_t *b, const char *name, const char *help, long long v)
{
    head(b, name, "gauge", help);
    put(b, "%s %lld\n", name, v);
}
static void gauge_f(buf_t *b, const char *name, const char *help, double v)
{
    head(b, name, "gauge", help);
    put(b, "%s %.6f\n", name, v);
}

static void hist_put(buf_t *b, const char *name, const char *help, const double *le, int n_le,
                     const uint64_t *counts, uint64_t count, double sum)
{
    head(b, name, "histogram", help);
    uint64_t cum = 0;
    for (int i = 0; i < n_le; i++) {
        cum += counts[i];
        put(b, "%s_bucket{le=\"%g\"} %llu\n", name, le[i], (unsigned long long)cum);
    }
    put(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)count);
    put(b, "%s_sum %.9g\n%s_count %llu\n", name, sum, name, (unsigned long long)count);
}

char *sits_srv_metrics_render(sits_srv_metrics_t *m, const sits_sched_stats_t *st, const sits_otlp_stats_t *otlp, int inflight,
                              size_t *len_p)
{
    buf_t b = { .p = malloc(8192), .cap = 8192 };
    if (!b.p) return NULL;
    b.p[0] = 0;
    sits_srv_metrics_t c;
    pthread_mutex_lock(&m->mu);
    memcpy(&c, m, sizeof c);
    pthread_mutex_unlock(&m->mu);

    head(&b, "sits_requests_total", "counter", "HTTP responses by status code.");
    for (int i = 0; i < c.n_status; i++)
        put(&b, "sits_requests_total{status=\"%d\"} %llu\n", c.status_code[i], (unsigned long long)c.status_count[i]);
    head(&b, "sits_request_finished_total", "counter", "Generation requests finished, by finish reason.");
    static const char *const reasons[5] = { NULL, "stop", "length", "abort", "error" };
    for (int f = 1; f < 5; f++)
        put(&b, "sits_request_finished_total{finish_reason=\"%s\"} %llu\n", reasons[f],
            (unsigned long long)c.finish_count[f]);
    hist_put(&b, "sits_time_to_first_token_seconds", "Time from request arrival to its first generated token.",
             c.ttft.le, c.ttft.n_le, c.ttft.counts, c.ttft.count, c.ttft.sum);
    hist_put(&b, "sits_inter_token_latency_seconds", "Time between generated tokens of a request.", c.itl.le,
             c.itl.n_le, c.itl.counts, c.itl.count, c.itl.sum);
    hist_put(&b, "sits_e2e_request_latency_seconds", "Time from request arrival to its last token.", c.e2e.le,
             c.e2e.n_le, c.e2e.counts, c.e2e.count, c.e2e.sum);
    counter(&b, "sits_prompt_tokens_total", "Prompt tokens of finished requests.", c.prompt_tokens);
    counter(&b, "sits_generation_tokens_total", "Tokens generated for finished requests.", c.generation_tokens);
    gauge_i(&b, "sits_num_requests_inflight", "Generation requests the HTTP server is serving.", inflight);
    if (c.tenants) {
        head(&b, "sits_tenant_requests_total", "counter", "Finished requests by tenant.");
        for (int t = 0; t < c.tenants->n; t++)
            put(&b, "sits_tenant_requests_total{tenant=\"%s\"} %llu\n", c.tenants->t[t].name, (unsigned long long)c.t_requests[t]);
        head(&b, "sits_tenant_generation_tokens_total", "counter", "Generated tokens by tenant.");
        for (int t = 0; t < c.tenants->n; t++)
            put(&b, "sits_tenant_generation_tokens_total{tenant=\"%s\"} %llu\n", c.tenants->t[t].name,
                (unsigned long long)c.t_generation_tokens[t]);
        head(&b, "sits_tenant_slo_met_total", "counter", "Finished requests that met the tenant's TTFT and TPOT targets.");
        for (int t = 0; t < c.tenants->n; t++)
            put(&b, "sits_tenant_slo_met_total{tenant=\"%s\",slo=\"ttft\"} %llu\nsits_tenant_slo_met_total{tenant=\"%s\",slo=\"tpot\"} %llu\n"
                "sits_tenant_slo_met_total{tenant=\"%s\",slo=\"both\"} %llu\n", c.tenants->t[t].name,
                (unsigned long long)c.t_ttft_met[t], c.tenants->t[t].name, (unsigned long long)c.t_tpot_met[t],
                c.tenants->t[t].name, (unsigned long long)c.t_slo_met[t]);
        head(&b, "sits_tenant_slo_attainment", "gauge", "Share of the tenant's finished requests that met both targets.");
        for (int t = 0; t < c.tenants->n; t++)
            put(&b, "sits_tenant_slo_attainment{tenant=\"%s\"} %.6f\n", c.tenants->t[t].name,
                c.t_requests[t] ? (double)c.t_slo_met[t] / (double)c.t_requests[t] : 0.0);
    }
    if (st) {
        gauge_i(&b, "sits_num_requests_running", "Sequences in the running batch.", st->running);
        gauge_i(&b, "sits_num_requests_waiting", "Sequences waiting to be scheduled.", st->waiting);
        gauge_i(&b, "sits_num_requests_swapped", "Preempted sequences whose KV blocks are offloaded.", st->swapped);
        gauge_i(&b, "sits_kv_blocks_used", "KV cache blocks in use.", st->kv_blocks_total - st->kv_blocks_free);
        gauge_i(&b, "sits_kv_blocks_free", "KV cache blocks free.", st->kv_blocks_free);
        counter(&b, "sits_preemptions_total", "Sequences preempted by the scheduler.", st->preemptions);
        /* [kv offload] */
        counter(&b, "sits_kv_swapped_out_total", "Preempted sequences whose KV blocks went to the offload tiers.",
                st->kv_swap_out);
        counter(&b, "sits_kv_swapped_in_total", "Swapped-out sequences whose KV blocks came back from the offload tiers.",
                st->kv_swap_in);
        counter(&b, "sits_kv_swap_failures_total", "Swaps that failed on some rank (tier full, disk error, bad checksum): recomputed instead.",
                st->kv_swap_failed);
        counter(&b, "sits_kv_swap_prefetched_total",
                "Swapped-out sequences brought back whose KV bytes the ranks had prefetched from the offload tiers "
                "while earlier steps ran.", st->kv_swap_prefetched);
        head(&b, "sits_kv_swap_out_bytes_total", "counter", "KV bytes swapped out, by tier, summed over the ranks.");
        put(&b, "sits_kv_swap_out_bytes_total{tier=\"host\"} %llu\nsits_kv_swap_out_bytes_total{tier=\"disk\"} %llu\n",
            (unsigned long long)st->kv_swap_out_bytes[0], (unsigned long long)st->kv_swap_out_bytes[1]);
        head(&b, "sits_kv_swap_in_bytes_total", "counter", "KV bytes swapped back in, by tier, summed over the ranks.");
        put(&b, "sits_kv_swap_in_bytes_total{tier=\"host\"} %llu\nsits_kv_swap_in_bytes_total{tier=\"disk\"} %llu\n",
            (unsigned long long)st->kv_swap_in_bytes[0], (unsigned long long)st->kv_swap_in_bytes[1]);
        counter(&b, "sits_prompt_tokens_computed_total",
                "Prompt tokens whose KV the scheduler computed (a prompt shared by n > 1 choices counts once).",
                st->prompt_tokens);
        counter(&b, "sits_forked_sequences_total", "Choices (n > 1) forked off their prompt's last chunk.", st->forked_seqs);
        counter(&b, "sits_kv_blocks_copied_total", "Shared KV blocks copied on write (n > 1).", st->kv_blocks_copied);
        counter(&b, "sits_kv_sliding_window_freed_blocks_total",
                "KV blocks sequences gave back because they fell out of every layer's sliding window.", st->kv_swa_freed_blocks);
        counter(&b, "sits_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
                st->prefix_query_tokens);
        counter(&b, "sits_prefix_cache_hits_total", "Prompt tokens found in the prefix cache (not recomputed).",
                st->prefix_hit_tokens);
        gauge_f(&b, "sits_prefix_cache_hit_rate", "Prefix cache hits / queries since start.",
                st->prefix_query_tokens ? (double)st->prefix_hit_tokens / (double)st->prefix_query_tokens : 0.0);
        gauge_i(&b, "sits_sched_allowed_num_seqs", "Running sequences the adaptive batch controller allows.",
                st->allowed_seqs);
        gauge_i(&b, "sits_sched_allowed_batched_tokens", "Tokens per step the adaptive batch controller allows.",
                st->allowed_tokens);
        gauge_f(&b, "sits_sched_itl_p99_seconds", "Windowed P99 TPOT of the requests finished lately, as the controller sees it.",
                st->itl_p99_ms / 1e3);
        gauge_i(&b, "sits_kv_blocks_cached", "KV blocks registered in the prefix cache (in use or evictable).",
                st->kv_blocks_cached);
        /* [kv move] migrations between replicas / prefill -> decode hand-offs */
        counter(&b, "sits_kv_migrations_total", "KV moves between replicas (--dp) or prefill -> decode (--disaggregate).",
                st->kv_migrations);
        counter(&b, "sits_kv_migrated_sequences_total", "Sequences carried by KV moves.", st->kv_migrated_seqs);
        counter(&b, "sits_kv_migrated_blocks_total", "KV blocks carried by KV moves.", st->kv_migrated_blocks);
        if (st->spec_drafter && st->spec_drafter[0]) {   /* [speculative] per drafter (one per server) */
            const char *d = st->spec_drafter;
            head(&b, "sits_spec_draft_tokens_total", "counter", "Tokens proposed by the speculative drafter.");
            put(&b, "sits_spec_draft_tokens_total{drafter=\"%s\"} %llu\n", d, (unsigned long long)st->spec_draft_tokens);
            head(&b, "sits_spec_accepted_tokens_total", "counter", "Drafted tokens the verification accepted.");
            put(&b, "sits_spec_accepted_tokens_total{drafter=\"%s\"} %llu\n", d, (unsigned long long)st->spec_accepted_tokens);
            head(&b, "sits_spec_verifications_total", "counter", "Sequences verified (one per speculating sequence per step).");
            put(&b, "sits_spec_verifications_total{drafter=\"%s\"} %llu\n", d, (unsigned long long)st->spec_verifications);
            head(&b, "sits_spec_acceptance_rate", "gauge", "Accepted / drafted tokens since start.");
            put(&b, "sits_spec_acceptance_rate{drafter=\"%s\"} %.6f\n", d,
                st->spec_draft_tokens ? (double)st->spec_accepted_tokens / (double)st->spec_draft_tokens : 0.0);
            if (!strcmp(d, "draft_model"))
                gauge_i(&b, "sits_spec_draft_kv_blocks_used", "The draft model's KV blocks held by sequences.",
                        st->spec_draft_kv_blocks_used);
        }
        if (st->moe_experts > 0) {   /* [moe] one series per expert (at most SITS_MOE_METRIC_EXPERTS) */
            head(&b, "sits_moe_expert_tokens_total", "counter",
                 "Tokens routed to each expert of a mixture-of-experts model, summed over its MoE layers (load balance).");
            for (int x = 0; x < st->moe_experts; x++)
                put(&b, "sits_moe_expert_tokens_total{expert=\"%d\"} %llu\n", x, (unsigned long long)st->moe_expert_tokens[x]);
        }
        counter(&b, "sits_kv_migrated_bytes_total", "Message bytes received by the destination ranks of KV moves.",
                st->kv_migrated_bytes);
        counter(&b, "sits_kv_migrations_failed_total", "KV moves rejected by a destination rank (the sequences recomputed).",
                st->kv_migrations_failed);
        counter(&b, "sits_kv_move_chunks_total", "Exchanges the KV moves took: a move larger than the staging set aside at "
                "start-up (--kv-move-buffer) goes through it in chunks.", st->kv_move_chunks);
        counter(&b, "sits_device_allocations_after_start_total",
                "Device allocations (cudaMalloc; on the CPU backend its allocations) by the leader's backend after "
                "start-up: the memory plan sets everything aside at start, so this stays 0.", st->dev_allocs_after_start);
        counter(&b, "sits_device_allocated_bytes_after_start_total", "Bytes of those allocations.",
                st->dev_alloc_bytes_after_start);
        counter(&b, "sits_logits_host_downloads_total",
                "Steps whose whole logits (n x vocabulary shard) the leader's engine downloaded to the host: only the "
                "host sampler's fallbacks (top-p nucleus wider than the candidates, top_k > 1024); logprobs, penalties, "
                "logit_bias and min_p run on the device.", st->logits_downloads);
        counter(&b, "sits_logprob_device_steps_total", "Steps whose logprobs were reduced on the device.",
                st->device_logprob_steps);
        uint64_t steps = 0;   /* the +Inf bucket must equal _count: count what the buckets hold */
        for (int i = 0; i <= NLE(step_le); i++) steps += st->step_hist[i];
        hist_put(&b, "sits_step_seconds", "Duration of scheduler steps.", step_le, NLE(step_le), st->step_hist,
                 steps, st->step_seconds_sum);
        /* [scale] where the steps' time goes (sched.h SITS_PHASE_*): all but forward is host work */
        static const char *const phase[SITS_PHASES] = { "schedule", "plan", "forward", "deliver" };
        head(&b, "sits_step_phase_seconds_total", "counter",
             "Leader time in steps by phase: schedule (admission, batch choice), plan (inputs and their broadcast), "
             "forward (forward pass and sampling), deliver (tokens to requests).");
        for (int f = 0; f < SITS_PHASES; f++)
            put(&b, "sits_step_phase_seconds_total{phase=\"%s\"} %.6f\n", phase[f], st->step_phase_s[f]);
        /* [structured output] the host's grammar masks, and those made while the device ran the forward pass */
        counter(&b, "sits_grammar_masks_total", "Allowed-token masks made for constrained output rows.", st->grammar_masks);
        counter(&b, "sits_grammar_masks_overlapped_total",
                "Masks made while the device ran the step's forward pass (sent after the plan, not in it).",
                st->grammar_masks_overlapped);
        head(&b, "sits_grammar_mask_seconds_total", "counter", "Host time making grammar masks (overlapped or not).");
        put(&b, "sits_grammar_mask_seconds_total %.6f\n", st->grammar_mask_s);
    }
    if (otlp) {
        counter(&b, "sits_otlp_exported_requests_total", "Requests whose spans the OTLP collector accepted.",
                otlp->requests_exported);
        counter(&b, "sits_otlp_dropped_requests_total", "Requests whose spans were dropped (queue full or export failed).",
                otlp->requests_dropped);
        counter(&b, "sits_otlp_failed_exports_total", "OTLP posts that failed.", otlp->posts_failed);
    }
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    *len_p = b.n;
    return b.p;
}
