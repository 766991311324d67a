/* tests/data/test_sampler.c - DistributedSampler semantics: shards disjoint,
 * covering, equal lengths; padding / drop_last counts; leftover set; the
 * permutation; mid-epoch start and resume with another world size; exact
 * evaluation sharding. */
#include "data/sampler.h"
#include "testutil.h"

/* torch.utils.data.DistributedSampler.__iter__, transcribed (with our
 * permutation in place of torch.randperm). */
static int64_t torch_rank_list(const sg_sampler *s, int64_t epoch, int rank, int64_t *out) {
    int64_t n = s->n, r = s->world;
    int64_t num = (s->drop_last && n % r) ? (int64_t)ceil((double)(n - r) / r)
                                          : (int64_t)ceil((double)n / r);
    int64_t total = num * r;
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)(total > n ? total : n));
    sg_sampler_permutation(s, epoch, idx);
    if (!s->drop_last) {
        int64_t pad = total - n;
        if (pad <= n) {
            for (int64_t i = 0; i < pad; i++) idx[n + i] = idx[i];
        } else { /* indices * ceil(pad / n) then [:pad] */
            for (int64_t i = 0; i < pad; i++) idx[n + i] = idx[i % n];
        }
    }
    int64_t k = 0;
    for (int64_t i = rank; i < total; i += r) out[k++] = idx[i];
    free(idx);
    return k;
}

static void test_permutation(void) {
    sg_sampler s = {1000, 1, 1, 0, 7};
    int64_t p[1000], q[1000];
    sg_sampler_permutation(&s, 3, p);
    sg_sampler_permutation(&s, 3, q);
    CHECK(memcmp(p, q, sizeof p) == 0); /* deterministic */
    int seen[1000] = {0}, fixed = 0;
    for (int i = 0; i < 1000; i++) {
        CHECK(p[i] >= 0 && p[i] < 1000 && !seen[p[i]]);
        seen[p[i]] = 1;
        fixed += p[i] == i;
    }
    CHECK(fixed < 10); /* a shuffle, not the identity (expected 1) */
    sg_sampler_permutation(&s, 4, q);
    CHECK(memcmp(p, q, sizeof p) != 0); /* set_epoch changes the order */
    /* seed + epoch is the key: (seed 7, epoch 4) == (seed 8, epoch 3) as in torch */
    sg_sampler t = s;
    t.seed = 8;
    int64_t r[1000];
    sg_sampler_permutation(&t, 3, r);
    CHECK(memcmp(q, r, sizeof q) == 0);
    s.shuffle = 0;
    sg_sampler_permutation(&s, 3, p);
    for (int i = 0; i < 1000; i++) CHECK(p[i] == i);
}

static void test_matches_torch_and_properties(void) {
    int64_t sizes[] = {1, 2, 3, 7, 10, 16, 17, 23, 100};
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        for (int world = 1; world <= 5; world++) {
            for (int drop = 0; drop <= 1; drop++) {
                for (int shuf = 0; shuf <= 1; shuf++) {
                    int64_t n = sizes[si];
                    sg_sampler s = {n, world, shuf, drop, 123};
                    int64_t per = sg_sampler_per_rank(&s, 0);
                    int count[100] = {0};
                    int64_t got[200], want[200];
                    for (int r = 0; r < world; r++) {
                        int64_t k = sg_sampler_rank_indices(&s, 5, r, 0, got);
                        int64_t kw = torch_rank_list(&s, 5, r, want);
                        CHECK_EQ_INT(k, per); /* equal lengths */
                        CHECK_EQ_INT(k, kw);
                        CHECK(memcmp(got, want, sizeof(int64_t) * (size_t)k) == 0);
                        for (int64_t i = 0; i < k; i++) count[got[i]]++;
                    }
                    int64_t left[8];
                    int64_t nl = sg_sampler_leftover(&s, 5, 0, left);
                    for (int64_t i = 0; i < nl; i++) count[left[i]] += 100;
                    int64_t dup = 0, missing = 0;
                    for (int64_t i = 0; i < n; i++) {
                        if (count[i] == 0) missing++;
                        if (count[i] % 100 > 1) dup += count[i] % 100 - 1;
                        CHECK(count[i] / 100 <= 1);
                        CHECK(!(count[i] >= 100 && count[i] % 100)); /* leftover not trained */
                    }
                    CHECK_EQ_INT(missing, 0); /* trained + leftover cover everything */
                    if (drop) {
                        CHECK_EQ_INT(dup, 0); /* disjoint */
                        CHECK_EQ_INT(nl, n % world ? n - per * world : 0);
                        CHECK(nl < world);
                    } else {
                        CHECK_EQ_INT(nl, 0);
                        CHECK_EQ_INT(dup, per * world - n); /* padding count */
                        CHECK(per * world - n < world || n < world);
                    }
                }
            }
        }
    }
    /* The documented counts: N = 10, R = 4 -> pad 2 / drop 2. */
    sg_sampler a = {10, 4, 1, 0, 0}, b = {10, 4, 1, 1, 0};
    CHECK_EQ_INT(sg_sampler_per_rank(&a, 0), 3);
    CHECK_EQ_INT(sg_sampler_per_rank(&b, 0), 2);
    int64_t left[4];
    CHECK_EQ_INT(sg_sampler_leftover(&b, 0, 0, left), 2);
    int64_t perm[10];
    sg_sampler_permutation(&b, 0, perm);
    CHECK(left[0] == perm[8] && left[1] == perm[9]);
}

static void test_mid_epoch_start_same_world(void) {
    for (int drop = 0; drop <= 1; drop++) {
        sg_sampler s = {23, 3, 1, drop, 9};
        int64_t full[3][20], tail[20];
        int64_t per = sg_sampler_per_rank(&s, 0);
        for (int r = 0; r < 3; r++) sg_sampler_rank_indices(&s, 2, r, 0, full[r]);
        /* After k per-rank steps of batch 2: global position p = k * 2 * 3. */
        for (int k = 0; 6 * k < 23; k++) {
            int64_t p = 6 * k;
            CHECK_EQ_INT(sg_sampler_per_rank(&s, p), per - 2 * k);
            for (int r = 0; r < 3; r++) {
                int64_t n = sg_sampler_rank_indices(&s, 2, r, p, tail);
                CHECK_EQ_INT(n, per - 2 * k);
                for (int64_t i = 0; i < n; i++) CHECK_EQ_INT(tail[i], full[r][2 * k + i]);
            }
            int64_t l0[3], l1[3];
            int64_t n0 = sg_sampler_leftover(&s, 2, 0, l0), n1 = sg_sampler_leftover(&s, 2, p, l1);
            CHECK_EQ_INT(n0, n1);
            for (int64_t i = 0; i < n0; i++) CHECK_EQ_INT(l0[i], l1[i]);
        }
        CHECK_EQ_INT(sg_sampler_per_rank(&s, 23), 0);
        CHECK_EQ_INT(sg_sampler_per_rank(&s, 30), 0);
    }
}

static void test_resume_other_world(void) {
    /* 4 ranks ran 2 steps of batch 2 (p = 16) of N = 50; resume on 3 ranks. */
    sg_sampler s4 = {50, 4, 1, 0, 11}, s3 = {50, 3, 1, 0, 11};
    int64_t perm[50], seen[50] = {0}, buf[64];
    sg_sampler_permutation(&s4, 1, perm);
    for (int r = 0; r < 4; r++) {
        int64_t n = sg_sampler_rank_indices(&s4, 1, r, 0, buf);
        CHECK(n >= 4);
        for (int i = 0; i < 4; i++) seen[buf[i]]++; /* the 2 steps done */
    }
    int64_t p = 16, done = 0;
    for (int i = 0; i < 50; i++) done += seen[i];
    CHECK_EQ_INT(done, p);
    for (int i = 0; i < 16; i++) CHECK(seen[perm[i]] == 1); /* consumed = perm[0..p) */
    int64_t per = sg_sampler_per_rank(&s3, p);
    CHECK_EQ_INT(per, 12); /* ceil(34 / 3) */
    for (int r = 0; r < 3; r++) {
        int64_t n = sg_sampler_rank_indices(&s3, 1, r, p, buf);
        CHECK_EQ_INT(n, per);
        for (int64_t i = 0; i < n; i++) seen[buf[i]]++;
    }
    /* Every sample of the epoch seen, the consumed ones not again; padding 2. */
    int64_t twice = 0;
    for (int i = 0; i < 50; i++) {
        CHECK(seen[i] >= 1);
        twice += seen[i] - 1;
    }
    CHECK_EQ_INT(twice, 36 - 34);
    for (int i = 0; i < 16; i++) CHECK(seen[perm[i]] == 1 || i < 2);
}

static void test_eval_shard_exact(void) {
    for (int64_t n = 0; n < 30; n++) {
        for (int world = 1; world <= 8; world++) {
            int count[30] = {0};
            int64_t out[30], mn = 1 << 30, mx = 0;
            for (int r = 0; r < world; r++) {
                int64_t k = sg_eval_shard(n, world, r, out);
                CHECK_EQ_INT(k, sg_eval_shard_size(n, world, r));
                for (int64_t i = 0; i < k; i++) count[out[i]]++;
                if (k < mn) mn = k;
                if (k > mx) mx = k;
            }
            for (int64_t i = 0; i < n; i++) CHECK_EQ_INT(count[i], 1); /* exactly once */
            CHECK(mx - mn <= 1);
        }
    }
}

int main(void) {
    TEST_RUN(test_permutation);
    TEST_RUN(test_matches_torch_and_properties);
    TEST_RUN(test_mid_epoch_start_same_world);
    TEST_RUN(test_resume_other_world);
    TEST_RUN(test_eval_shard_exact);
    return TEST_EXIT();
}
