/* tests/cuda_emu/runtime.cc - the CUDA runtime API of the emulated device.
 *
 * Owns the allocation table, the streams, events and graphs, the sticky
 * error, and the stream-order check (emu_device.h has the contract).
 *
 * Memory: a device allocation is host memory between two guard zones, all
 * of it filled with 0xff bytes (NaN as float, double and bf16) when
 * allocated, so that reading what was never written, or reading just past
 * either end, gives NaN; a kernel that wrote into a guard zone is reported
 * after it ran. Kernels may be given device pointers, or pinned host memory
 * (reachable through unified addressing); anything else is a fault when the
 * kernel runs, as it would be on a GPU.
 *
 * Streams are queues. Work runs only at synchronisation points (stream,
 * event and device synchronisation, event queries, synchronous copies, a
 * free), and then, among the streams whose next piece of work may run, the
 * one picked by SG_EMU_STREAMS: by default the most recently issued, so work
 * that should have waited for another stream and did not runs before what
 * it needed. Events carry the generation of their latest record; a wait
 * holds its stream until that record has run. Gated work (a collective
 * whose peers have not joined) holds its stream until its gate opens, which
 * only another host thread can make happen (ncclCommAbort): a
 * synchronisation that needs it waits with the device lock released, as a
 * GPU's cudaFree waits behind a stuck NCCL kernel, and an event query
 * answers not ready.
 *
 * Ordering check: every piece of work gets a vector clock when issued
 * (stream order, event waits, and host synchronisation: what the host has
 * waited for precedes everything it issues afterwards); each byte range it
 * touches is compared with the ranges touched by earlier work not yet known
 * to precede everything, and two touches of one byte by unordered work, one
 * writing, is a fault naming both.
 *
 * Graphs: capture records the work issued on the capturing stream; a launch
 * issues the recorded work again on the launch stream, checked afresh.
 */
#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <pthread.h>
#include <random>
#include <set>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <time.h>
#include <vector>

#include "tests/cuda_emu/emu_device.h"

void sg_emu_set_launch_error(cudaError_t e);

namespace {

pthread_mutex_t mu;
thread_local int mu_depth; /* this thread's holds of the recursive lock */
pthread_once_t mu_once = PTHREAD_ONCE_INIT;
void mu_init() {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&mu, &a);
}

cudaError_t sticky = cudaSuccess;
thread_local cudaError_t last_error = cudaSuccess;
thread_local int cur_device = 0;

/* ---- configuration ---- */
int env_int(const char *name, int def, int lo, int hi) {
    const char *e = getenv(name);
    if (!e || !*e) return def;
    char *end;
    long v = strtol(e, &end, 10);
    if (*end || v < lo || v > hi) {
        fprintf(stderr, "emulated CUDA device: %s=%s: an integer in %d..%d\n", name, e, lo, hi);
        exit(2);
    }
    return (int)v;
}
enum { S_LATEST, S_EARLIEST, S_RANDOM };
int stream_policy = -1;
std::mt19937_64 stream_rng;
void read_policy() {
    if (stream_policy >= 0) return;
    const char *e = getenv("SG_EMU_STREAMS");
    if (!e || !*e || strcmp(e, "latest") == 0) stream_policy = S_LATEST;
    else if (strcmp(e, "earliest") == 0) stream_policy = S_EARLIEST;
    else if (strncmp(e, "random:", 7) == 0) {
        stream_policy = S_RANDOM;
        stream_rng.seed(strtoull(e + 7, NULL, 10));
    } else {
        fprintf(stderr,
                "emulated CUDA device: SG_EMU_STREAMS=%s: use latest, earliest or "
                "random:SEED\n",
                e);
        exit(2);
    }
}

/* ---- memory ---- */
/* Guard zones of 0xff bytes on both sides of a device allocation. Under
 * AddressSanitizer none: its own redzones sit right at the ends and report
 * the access itself, at the faulting instruction. */
#if defined(__SANITIZE_ADDRESS__)
constexpr size_t GUARD = 0;
#else
constexpr size_t GUARD = 256;
#endif
struct alloc_t {
    char *raw; /* what malloc gave */
    size_t bytes;
    sg_emu_mem kind;
};
std::map<uintptr_t, alloc_t> allocs; /* by user address */
/* Freed device memory stays mapped and poisoned (not given back to malloc)
 * up to QUARANTINE bytes, oldest released first: while it is here a stale
 * pointer into it is known to be one (SG_EMU_MEM_FREED), and reads through
 * it give NaN. */
constexpr size_t QUARANTINE = (size_t)256 << 20;
struct freed_t {
    char *raw;
    size_t bytes;
};
std::map<uintptr_t, freed_t> freed; /* by user address */
std::deque<uintptr_t> freed_order;
size_t freed_bytes;

void quarantine(uintptr_t user, char *raw, size_t bytes) {
    memset(raw, 0xff, bytes + 2 * GUARD);
    freed[user] = freed_t{raw, bytes};
    freed_order.push_back(user);
    freed_bytes += bytes;
    while (freed_bytes > QUARANTINE && !freed_order.empty()) {
        auto it = freed.find(freed_order.front());
        freed_order.pop_front();
        if (it == freed.end()) continue;
        freed_bytes -= it->second.bytes;
        free(it->second.raw);
        freed.erase(it);
    }
}

bool is_freed(const void *p) {
    auto it = freed.upper_bound((uintptr_t)p);
    if (it == freed.begin()) return false;
    --it;
    return (uintptr_t)p < it->first + it->second.bytes;
}
size_t in_use;
const size_t total_mem = (size_t)16 << 30;

const alloc_t *find_alloc(const void *p, uintptr_t *base) {
    uintptr_t a = (uintptr_t)p;
    auto it = allocs.upper_bound(a);
    if (it == allocs.begin()) return nullptr;
    --it;
    if (a > it->first + it->second.bytes) return nullptr; /* one past the end counts */
    if (base) *base = it->first;
    return &it->second;
}

void *emu_alloc(size_t bytes, sg_emu_mem kind) {
    if (bytes == 0) bytes = 1;
    if (kind == SG_EMU_MEM_DEVICE && in_use + bytes > total_mem) return nullptr;
    char *raw = (char *)malloc(bytes + 2 * GUARD);
    if (!raw) return nullptr;
    memset(raw, 0xff, bytes + 2 * GUARD);
    uintptr_t u = (uintptr_t)(raw + GUARD);
    allocs[u] = alloc_t{raw, bytes, kind};
    if (kind == SG_EMU_MEM_DEVICE) in_use += bytes;
    return raw + GUARD;
}

bool guards_intact(const alloc_t &a) {
    for (size_t i = 0; i < GUARD; i++)
        if ((unsigned char)a.raw[i] != 0xff || (unsigned char)a.raw[GUARD + a.bytes + i] != 0xff)
            return false;
    return true;
}

/* ---- events, streams, work ---- */
typedef std::vector<uint64_t> vclock;
void vc_join(vclock &a, const vclock &b) {
    if (a.size() < b.size()) a.resize(b.size(), 0);
    for (size_t i = 0; i < b.size(); i++) a[i] = std::max(a[i], b[i]);
}
uint64_t vc_at(const vclock &a, size_t i) { return i < a.size() ? a[i] : 0; }

struct event_t;
struct stream_t;
enum { W_WORK, W_RECORD, W_WAIT };
struct work_t {
    uint64_t seq;
    int kind;
    const char *what;
    std::vector<sg_emu_use> uses;
    std::function<void()> fn;
    event_t *ev;
    uint64_t gen;
    std::function<bool()> gate; /* W_WORK that may not start yet (empty: none) */
};
struct capture_t {
    pthread_t thread;
    std::vector<work_t> work;
    bool invalid;
    std::string why;
};
struct stream_t {
    size_t idx; /* its component of the vector clocks */
    std::deque<work_t> q;
    vclock vc;
    capture_t *cap;
    bool live;
};
struct event_t {
    uint64_t recorded; /* generation of the latest record issued */
    std::set<uint64_t> pending;
    vclock vc; /* clock of the latest record */
    unsigned flags;
};
struct graph_t {
    std::vector<work_t> work;
};

std::vector<stream_t *> streams; /* every stream ever made, [0] the legacy one */
vclock host_vc;
uint64_t next_seq = 1;

stream_t *legacy() {
    if (streams.empty()) {
        stream_t *s = new stream_t();
        s->idx = 0;
        s->live = true;
        streams.push_back(s);
    }
    return streams[0];
}

stream_t *stream_of(cudaStream_t s) {
    if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return legacy();
    return (stream_t *)s;
}

/* the ordering check's record of a touch */
struct touch_t {
    uintptr_t lo, hi;
    int write;
    size_t stream;
    uint64_t clock;
    const char *what;
    int arg;
};
std::map<uintptr_t, std::vector<touch_t>> touches; /* by allocation */

void prune_touches() {
    for (auto it = touches.begin(); it != touches.end();) {
        auto &v = it->second;
        v.erase(
            std::remove_if(v.begin(), v.end(),
                           [](const touch_t &t) { return t.clock <= vc_at(host_vc, t.stream); }),
            v.end());
        if (v.empty()) it = touches.erase(it);
        else ++it;
    }
}

void check_order(stream_t *s, const work_t &w, const vclock &vc) {
    for (const sg_emu_use &u : w.uses) {
        uintptr_t base;
        const alloc_t *a = find_alloc(u.p, &base);
        if (!a || !u.p) continue;
        uintptr_t lo = (uintptr_t)u.p, hi = lo + (u.bytes ? u.bytes : 1);
        if (hi > base + a->bytes) hi = base + a->bytes;
        if (lo >= hi) continue;
        auto &list = touches[base];
        for (const touch_t &t : list) {
            if (t.stream == s->idx || !(t.write || u.write) || t.hi <= lo || hi <= t.lo) continue;
            if (t.clock <= vc_at(vc, t.stream)) continue; /* ordered */
            char a1[32] = "", a2[32] = "";
            if (t.arg >= 0) snprintf(a1, sizeof a1, " (argument %d)", t.arg);
            if (u.arg >= 0) snprintf(a2, sizeof a2, " (argument %d)", u.arg);
            sg_emu_fault(cudaErrorLaunchFailure,
                         "%s on stream %zu %s bytes [%zu, %zu) of a %zu-byte allocation%s that "
                         "%s on stream %zu %s%s, and nothing orders the two (no event wait "
                         "between the streams, no host synchronisation)",
                         w.what, s->idx, u.write ? "writes" : "reads", (size_t)(lo - base),
                         (size_t)(hi - base), a->bytes, a2, t.what, t.stream,
                         t.write ? "wrote" : "read", a1);
            return;
        }
        list.push_back(touch_t{lo, hi, u.write, s->idx, vc_at(vc, s->idx), w.what, u.arg});
    }
}

/* Runs one piece of work (the device lock held). */
void run_work(work_t &w) {
    if (w.kind == W_RECORD) {
        w.ev->pending.erase(w.gen);
        return;
    }
    if (w.kind == W_WAIT) return;
    if (sticky != cudaSuccess) return; /* a faulted device runs nothing more */
    for (const sg_emu_use &u : w.uses) {
        if (!u.p) continue;
        const alloc_t *a = find_alloc(u.p, nullptr);
        if (a) continue;
        char arg[32] = "";
        if (u.arg >= 0) snprintf(arg, sizeof arg, " argument %d,", u.arg);
        bool was_freed = is_freed(u.p);
        sg_emu_fault(cudaErrorIllegalAddress, "%s:%s %p is %s", w.what, arg, u.p,
                     was_freed ? "device memory already freed (cudaFree)"
                               : "not device memory (a host pointer, or never allocated)");
        return;
    }
    w.fn();
    for (const sg_emu_use &u : w.uses) {
        uintptr_t base;
        const alloc_t *a = find_alloc(u.p, &base);
        if (a && !guards_intact(*a)) {
            sg_emu_fault(cudaErrorIllegalAddress,
                         "%s wrote outside the %zu-byte allocation at %p (the guard zone "
                         "around it changed)",
                         w.what, a->bytes, (void *)base);
            memset(a->raw, 0xff, GUARD);
            memset(a->raw + GUARD + a->bytes, 0xff, GUARD);
        }
    }
}

bool runnable(const work_t &w) {
    if (w.kind == W_WORK) return !w.gate || w.gate();
    return w.kind != W_WAIT || !w.ev->pending.count(w.gen);
}

/* Some stream's next work is gated shut: only another host thread can let
 * the device go on. */
bool gated_shut() {
    for (stream_t *s : streams)
        if (!s->q.empty() && s->q.front().kind == W_WORK && s->q.front().gate &&
            !s->q.front().gate())
            return true;
    return false;
}

/* Lets the other host threads in for about a millisecond (the device lock
 * released however deep this thread holds it), then takes it back. */
void wait_outside() {
    int depth = mu_depth;
    for (int i = 0; i < depth; i++) sg_emu_unlock();
    struct timespec ts = {0, 1000 * 1000};
    nanosleep(&ts, nullptr);
    for (int i = 0; i < depth; i++) sg_emu_lock();
}

/* Runs one runnable head; false when none. */
bool step() {
    read_policy();
    std::vector<stream_t *> ready;
    for (stream_t *s : streams)
        if (!s->q.empty() && runnable(s->q.front())) ready.push_back(s);
    if (ready.empty()) return false;
    stream_t *pick = ready[0];
    if (stream_policy == S_RANDOM) pick = ready[stream_rng() % ready.size()];
    else
        for (stream_t *s : ready)
            if (stream_policy == S_LATEST ? s->q.front().seq > pick->q.front().seq
                                          : s->q.front().seq < pick->q.front().seq)
                pick = s;
    work_t w = std::move(pick->q.front());
    pick->q.pop_front();
    run_work(w);
    return true;
}

template <class Done> void drain_until(Done done, const char *what) {
    while (!done())
        if (!step()) {
            if (gated_shut()) { /* a collective waits for its peers: so does the host */
                wait_outside();
                continue;
            }
            fprintf(stderr,
                    "emulated CUDA device: %s can never complete (a wait on an event "
                    "whose record cannot run)\n",
                    what);
            abort();
        }
}

void host_saw(const vclock &vc) {
    vc_join(host_vc, vc);
    prune_touches();
}

bool capturing_here(stream_t *s) { return s->cap && pthread_equal(s->cap->thread, pthread_self()); }
/* a call the capturing thread may not make while any of its streams captures */
bool thread_capturing() {
    for (stream_t *s : streams)
        if (s->live && capturing_here(s)) return true;
    return false;
}
cudaError_t refuse_in_capture(const char *what) {
    for (stream_t *s : streams)
        if (s->live && capturing_here(s)) {
            s->cap->invalid = true;
            s->cap->why = what;
        }
    fprintf(stderr,
            "emulated CUDA device: %s while this thread captures a graph "
            "(cudaStreamCaptureModeThreadLocal forbids it)\n",
            what);
    return cudaErrorStreamCaptureUnsupported;
}

cudaError_t issue(stream_t *s, work_t w) {
    w.seq = next_seq++;
    if (s->cap) {
        if (!capturing_here(s)) {
            fprintf(stderr,
                    "emulated CUDA device: %s issued from another thread onto a stream "
                    "being captured\n",
                    w.what);
            s->cap->invalid = true;
            return cudaErrorStreamCaptureInvalidated;
        }
        if (w.kind != W_WORK) return cudaSuccess; /* single-stream graphs: in order already */
        s->cap->work.push_back(std::move(w));
        return cudaSuccess;
    }
    vc_join(s->vc, host_vc);
    if (s->vc.size() <= s->idx) s->vc.resize(s->idx + 1, 0);
    s->vc[s->idx]++;
    if (w.kind == W_WORK) check_order(s, w, s->vc);
    if (w.kind == W_RECORD) w.ev->vc = s->vc;
    s->q.push_back(std::move(w));
    return cudaSuccess;
}

/* ---- counters (SG_EMU_COUNTS=1: printed on stderr at exit), so a test
 * or a person can see what the host asked of the device: work issued by
 * kind, device-to-host copies, the times the host waited for the device,
 * graph launches ---- */
struct counts_t {
    long kernels, copies, d2h, memsets, waits, graph_launches;
} counts;
void print_counts(void) {
    fprintf(stderr,
            "emulated CUDA device: counts: %ld kernels and library calls issued, %ld copies "
            "(%ld device-to-host), %ld memsets, %ld host waits for the device, %ld graph "
            "launches\n",
            counts.kernels, counts.copies, counts.d2h, counts.memsets, counts.waits,
            counts.graph_launches);
}
pthread_once_t counts_once = PTHREAD_ONCE_INIT;
void counts_init(void) {
    const char *e = getenv("SG_EMU_COUNTS");
    if (e && *e && strcmp(e, "0") != 0) atexit(print_counts);
}
void count_work(const char *what) {
    pthread_once(&counts_once, counts_init);
    if (!strcmp(what, "cudaMemcpyAsync")) counts.copies++;
    else if (!strcmp(what, "cudaMemsetAsync")) counts.memsets++;
    else counts.kernels++;
}

cudaError_t ret(cudaError_t e) {
    if (e != cudaSuccess) last_error = e;
    return e;
}
/* calls that report asynchronous errors */
cudaError_t ret_async(cudaError_t e) { return ret(sticky != cudaSuccess ? sticky : e); }

} // namespace

/* ---- emu_device.h ---- */

void sg_emu_lock(void) {
    pthread_once(&mu_once, mu_init);
    pthread_mutex_lock(&mu);
    mu_depth++;
}
void sg_emu_unlock(void) {
    mu_depth--;
    pthread_mutex_unlock(&mu);
}

sg_emu_mem sg_emu_classify(const void *p, size_t bytes, const void **base, size_t *size) {
    sg_emu_guard g;
    uintptr_t b;
    const alloc_t *a = find_alloc(p, &b);
    if (a && (uintptr_t)p + bytes <= b + a->bytes) {
        if (base) *base = (const void *)b;
        if (size) *size = a->bytes;
        return a->kind;
    }
    return is_freed(p) ? SG_EMU_MEM_FREED : SG_EMU_MEM_NONE;
}

cudaError_t sg_emu_enqueue(cudaStream_t s, const char *what, std::vector<sg_emu_use> uses,
                           std::function<void()> work) {
    return sg_emu_enqueue_gated(s, what, std::move(uses), nullptr, std::move(work));
}

cudaError_t sg_emu_enqueue_gated(cudaStream_t s, const char *what, std::vector<sg_emu_use> uses,
                                 std::function<bool()> gate, std::function<void()> work) {
    sg_emu_guard g;
    stream_t *st = stream_of(s);
    if (!st->live) return cudaErrorInvalidResourceHandle;
    work_t w{};
    w.kind = W_WORK;
    w.what = what;
    w.uses = std::move(uses);
    w.fn = std::move(work);
    w.gate = std::move(gate);
    count_work(what);
    return issue(st, std::move(w));
}

void sg_emu_drain(cudaStream_t s) {
    sg_emu_guard g;
    counts.waits++;
    if (!s) {
        drain_until(
            [] {
                for (stream_t *x : streams)
                    if (!x->q.empty()) return false;
                return true;
            },
            "device synchronisation");
        for (stream_t *x : streams) host_saw(x->vc);
        return;
    }
    stream_t *st = stream_of(s);
    drain_until([st] { return st->q.empty(); }, "stream synchronisation");
    host_saw(st->vc);
}

void sg_emu_fault(cudaError_t e, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* one fault tends to repeat in every thread: the first 20 are enough */
    static int shown;
    if (shown < 20) fprintf(stderr, "emulated CUDA device: %s\n", msg);
    else if (shown == 20) fprintf(stderr, "emulated CUDA device: more faults not shown\n");
    shown++;
    if (sticky == cudaSuccess) sticky = e;
}

cudaError_t sg_emu_sticky(void) { return sticky; }
void sg_emu_set_launch_error(cudaError_t e) { last_error = e; }

int sg_emu_sm_count(void) {
    static int n = -1;
    if (n < 0) n = env_int("SG_EMU_SMS", 4, 1, 1024);
    return n;
}

/* ---- the runtime API ---- */

static int device_count() {
    static int n = -1;
    if (n < 0) n = env_int("SG_EMU_DEVICES", 1, 0, 16);
    return n;
}

extern "C" {

cudaError_t cudaGetDeviceCount(int *count) {
    sg_emu_guard g;
    *count = device_count();
    return ret(*count ? cudaSuccess : cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device) {
    sg_emu_guard g;
    if (device < 0 || device >= device_count()) return ret(cudaErrorInvalidDevice);
    cur_device = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
    *device = cur_device;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device) {
    sg_emu_guard g;
    if (device < 0 || device >= device_count()) return ret(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "emulated CUDA device (CPU, %d SMs)",
             sg_emu_sm_count());
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = sg_emu_sm_count();
    prop->totalGlobalMem = total_mem;
    prop->sharedMemPerBlock = 48 * 1024;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 2147483647;
    prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
    prop->maxThreadsPerMultiProcessor = 2048;
    prop->unifiedAddressing = 1;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v) {
    *v = CUDART_VERSION;
    return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int *v) {
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
    sg_emu_guard g;
    cudaError_t e = sticky != cudaSuccess ? sticky : last_error;
    last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) {
    sg_emu_guard g;
    return sticky != cudaSuccess ? sticky : last_error;
}

const char *cudaGetErrorName(cudaError_t e) {
    static const struct {
        cudaError_t e;
        const char *name;
    } names[] = {
        {cudaSuccess, "cudaSuccess"},
        {cudaErrorInvalidValue, "cudaErrorInvalidValue"},
        {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation"},
        {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration"},
        {cudaErrorInvalidDevice, "cudaErrorInvalidDevice"},
        {cudaErrorNoDevice, "cudaErrorNoDevice"},
        {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver"},
        {cudaErrorIllegalAddress, "cudaErrorIllegalAddress"},
        {cudaErrorLaunchFailure, "cudaErrorLaunchFailure"},
        {cudaErrorNotReady, "cudaErrorNotReady"},
        {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle"},
        {cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported"},
        {cudaErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated"},
        {cudaErrorStreamCaptureWrongThread, "cudaErrorStreamCaptureWrongThread"},
        {cudaErrorIllegalState, "cudaErrorIllegalState"},
        {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer"},
        {cudaErrorNoKernelImageForDevice, "cudaErrorNoKernelImageForDevice"},
        {cudaErrorUnsupportedPtxVersion, "cudaErrorUnsupportedPtxVersion"},
    };
    for (const auto &n : names)
        if (n.e == e) return n.name;
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorStreamCaptureUnsupported:
        return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
        return "operation failed due to a previous error during capture";
    default: return "unknown error (emulated device)";
    }
}

cudaError_t cudaFree(void *p) {
    sg_emu_guard g;
    if (thread_capturing()) return ret(refuse_in_capture("cudaFree"));
    sg_emu_drain(nullptr); /* cudaFree waits for the device */
    if (!p) return ret_async(cudaSuccess);
    auto it = allocs.find((uintptr_t)p);
    if (it == allocs.end() || it->second.kind != SG_EMU_MEM_DEVICE) {
        fprintf(stderr,
                "emulated CUDA device: cudaFree(%p): not the start of a live device "
                "allocation\n",
                p);
        return ret(cudaErrorInvalidValue);
    }
    alloc_t a = it->second;
    if (!guards_intact(a))
        sg_emu_fault(cudaErrorIllegalAddress,
                     "cudaFree(%p): something wrote outside this "
                     "%zu-byte allocation",
                     p, a.bytes);
    allocs.erase(it);
    touches.erase((uintptr_t)p);
    quarantine((uintptr_t)p, a.raw, a.bytes);
    in_use -= a.bytes;
    return ret_async(cudaSuccess);
}

cudaError_t cudaMalloc(void **p, size_t bytes) {
    sg_emu_guard g;
    if (thread_capturing()) return ret(refuse_in_capture("cudaMalloc"));
    *p = emu_alloc(bytes, SG_EMU_MEM_DEVICE);
    return ret(*p ? cudaSuccess : cudaErrorMemoryAllocation);
}

cudaError_t cudaMallocHost(void **p, size_t bytes) {
    sg_emu_guard g;
    *p = emu_alloc(bytes, SG_EMU_MEM_PINNED);
    return ret(*p ? cudaSuccess : cudaErrorMemoryAllocation);
}
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned int flags) {
    (void)flags;
    return cudaMallocHost(p, bytes);
}
cudaError_t cudaFreeHost(void *p) {
    sg_emu_guard g;
    sg_emu_drain(nullptr);
    auto it = allocs.find((uintptr_t)p);
    if (it == allocs.end() || it->second.kind != SG_EMU_MEM_PINNED)
        return ret(cudaErrorInvalidValue);
    free(it->second.raw);
    touches.erase((uintptr_t)p);
    allocs.erase(it);
    return ret_async(cudaSuccess);
}

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b) {
    sg_emu_guard g;
    *free_b = total_mem - in_use;
    *total_b = total_mem;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    sg_emu_guard g;
    if (flags != cudaStreamNonBlocking) {
        /* the backend makes only non-blocking streams; the implicit
         * synchronisation of blocking ones with the legacy stream is not
         * emulated, so refuse rather than emulate it wrong */
        fprintf(stderr,
                "emulated CUDA device: cudaStreamCreateWithFlags(%u): only "
                "cudaStreamNonBlocking streams are emulated\n",
                flags);
        return ret(cudaErrorInvalidValue);
    }
    legacy();
    stream_t *st = new stream_t();
    st->idx = streams.size();
    st->live = true;
    streams.push_back(st);
    *s = (cudaStream_t)st;
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
    sg_emu_guard g;
    stream_t *st = stream_of(s);
    if (st == legacy() || !st->live) return ret(cudaErrorInvalidResourceHandle);
    drain_until([st] { return st->q.empty(); }, "cudaStreamDestroy");
    st->live = false; /* kept: its index stays in the clocks */
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    sg_emu_guard g;
    stream_t *st = stream_of(s);
    if (!st->live) return ret(cudaErrorInvalidResourceHandle);
    if (st->cap || thread_capturing()) return ret(refuse_in_capture("cudaStreamSynchronize"));
    sg_emu_drain(s ? s : (cudaStream_t)legacy());
    return ret_async(cudaSuccess);
}

cudaError_t cudaDeviceSynchronize(void) {
    sg_emu_guard g;
    if (thread_capturing()) return ret(refuse_in_capture("cudaDeviceSynchronize"));
    sg_emu_drain(nullptr);
    return ret_async(cudaSuccess);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
    sg_emu_guard g;
    event_t *ev = new event_t();
    ev->flags = flags;
    *e = (cudaEvent_t)ev;
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t e) {
    sg_emu_guard g;
    if (!e) return ret(cudaErrorInvalidResourceHandle);
    /* a pending record may still be queued: the event lives on (leaked) */
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    sg_emu_guard g;
    event_t *ev = (event_t *)e;
    stream_t *st = stream_of(s);
    if (!ev || !st->live) return ret(cudaErrorInvalidResourceHandle);
    if (st->cap) return cudaSuccess; /* within a single-stream capture: order is the stream's */
    work_t w{};
    w.kind = W_RECORD;
    w.what = "cudaEventRecord";
    w.ev = ev;
    w.gen = ++ev->recorded;
    ev->pending.insert(w.gen);
    return ret(issue(st, std::move(w)));
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
    sg_emu_guard g;
    (void)flags;
    event_t *ev = (event_t *)e;
    stream_t *st = stream_of(s);
    if (!ev || !st->live) return ret(cudaErrorInvalidResourceHandle);
    if (ev->recorded == 0) return cudaSuccess; /* never recorded: nothing to wait for */
    if (st->cap) {
        fprintf(stderr, "emulated CUDA device: cudaStreamWaitEvent on a capturing stream: "
                        "multi-stream graphs are not emulated\n");
        st->cap->invalid = true;
        return ret(cudaErrorStreamCaptureUnsupported);
    }
    vc_join(st->vc, ev->vc);
    work_t w{};
    w.kind = W_WAIT;
    w.what = "cudaStreamWaitEvent";
    w.ev = ev;
    w.gen = ev->recorded;
    return ret(issue(st, std::move(w)));
}

static void event_done(event_t *ev) {
    uint64_t gen = ev->recorded;
    drain_until([ev, gen] { return !ev->pending.count(gen); }, "cudaEventSynchronize");
    host_saw(ev->vc);
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    sg_emu_guard g;
    event_t *ev = (event_t *)e;
    if (!ev) return ret(cudaErrorInvalidResourceHandle);
    counts.waits++;
    event_done(ev);
    return ret_async(cudaSuccess);
}

/* A query is a point where the device makes progress: it runs what the
 * event waits for (the host polls in a loop; a GPU would get there), unless
 * that is behind gated work: then not ready. */
cudaError_t cudaEventQuery(cudaEvent_t e) {
    sg_emu_guard g;
    event_t *ev = (event_t *)e;
    if (!ev) return ret(cudaErrorInvalidResourceHandle);
    if (thread_capturing()) return ret(refuse_in_capture("cudaEventQuery"));
    uint64_t gen = ev->recorded;
    while (ev->pending.count(gen) && step()) {}
    if (ev->pending.count(gen) && gated_shut()) /* not an error: not recorded as the last */
        return sticky != cudaSuccess ? ret(sticky) : cudaErrorNotReady;
    event_done(ev);
    return ret_async(cudaSuccess);
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s) {
    sg_emu_guard g;
    sg_emu_mem k = sg_emu_classify(p, bytes, nullptr, nullptr);
    if (k != SG_EMU_MEM_DEVICE) {
        fprintf(stderr,
                "emulated CUDA device: cudaMemsetAsync(%p, %zu bytes): not inside one "
                "device allocation\n",
                p, bytes);
        return ret(cudaErrorInvalidValue);
    }
    std::vector<sg_emu_use> u{sg_emu_use{p, bytes}};
    return ret(
        sg_emu_enqueue(s, "cudaMemsetAsync", u, [p, value, bytes] { memset(p, value, bytes); }));
}

/* asynchronous with respect to the host for device memory: queued on the
 * legacy stream, which the backend's non-blocking streams do not wait for */
cudaError_t cudaMemset(void *p, int value, size_t bytes) {
    return cudaMemsetAsync(p, value, bytes, nullptr);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s) {
    sg_emu_guard g;
    if (!bytes) return cudaSuccess;
    sg_emu_mem kd = sg_emu_classify(dst, bytes, nullptr, nullptr);
    sg_emu_mem ks = sg_emu_classify(src, bytes, nullptr, nullptr);
    bool d_dev = kd == SG_EMU_MEM_DEVICE, s_dev = ks == SG_EMU_MEM_DEVICE;
    bool ok = kind == cudaMemcpyDefault || (kind == cudaMemcpyHostToDevice && d_dev && !s_dev) ||
              (kind == cudaMemcpyDeviceToHost && s_dev && !d_dev) ||
              (kind == cudaMemcpyDeviceToDevice && s_dev && d_dev) ||
              (kind == cudaMemcpyHostToHost && !s_dev && !d_dev);
    if (!ok || kd == SG_EMU_MEM_FREED || ks == SG_EMU_MEM_FREED) {
        static const char *kn[] = {"not device memory", "device memory", "pinned host memory",
                                   "freed device memory"};
        fprintf(stderr,
                "emulated CUDA device: cudaMemcpyAsync(%p <- %p, %zu bytes, kind %d): "
                "the destination is %s, the source %s\n",
                dst, src, bytes, (int)kind, kn[kd], kn[ks]);
        return ret(cudaErrorInvalidValue);
    }
    std::vector<sg_emu_use> u;
    if (!d_dev && s_dev) counts.d2h++;
    if (kd != SG_EMU_MEM_NONE) u.push_back(sg_emu_use{dst, bytes, 1});
    if (ks != SG_EMU_MEM_NONE) u.push_back(sg_emu_use{src, bytes, 0});
    cudaError_t e;
    if (ks == SG_EMU_MEM_NONE) {
        /* pageable source: staged at the call, as the runtime does */
        std::shared_ptr<std::vector<char>> stage =
            std::make_shared<std::vector<char>>((const char *)src, (const char *)src + bytes);
        e = sg_emu_enqueue(s, "cudaMemcpyAsync", u,
                           [dst, stage] { memcpy(dst, stage->data(), stage->size()); });
    } else {
        e = sg_emu_enqueue(s, "cudaMemcpyAsync", u, [dst, src, bytes] { memcpy(dst, src, bytes); });
    }
    if (e != cudaSuccess) return ret(e);
    /* to pageable memory: returns once the copy is done */
    if (kd == SG_EMU_MEM_NONE) {
        stream_t *st = stream_of(s);
        if (st->cap) return ret(refuse_in_capture("cudaMemcpyAsync to pageable host memory"));
        sg_emu_drain((cudaStream_t)st);
        return ret_async(cudaSuccess);
    }
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    sg_emu_guard g;
    if (thread_capturing()) return ret(refuse_in_capture("cudaMemcpy"));
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
    if (e != cudaSuccess) return e;
    sg_emu_drain((cudaStream_t)legacy());
    return ret_async(cudaSuccess);
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, const void *func, int block,
                                                          size_t shmem) {
    (void)func;
    (void)shmem;
    if (block <= 0 || block > 1024) return ret(cudaErrorInvalidValue);
    *n = 2048 / block;
    return cudaSuccess;
}

/* what the occupancy template of cuda_runtime.h calls */
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, const void *func,
                                                                   int block, size_t shmem,
                                                                   unsigned int flags) {
    (void)flags;
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, func, block, shmem);
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
    sg_emu_guard g;
    stream_t *st = stream_of(s);
    if (st == legacy() || !st->live) return ret(cudaErrorStreamCaptureUnsupported);
    if (st->cap) return ret(cudaErrorIllegalState);
    if (mode != cudaStreamCaptureModeThreadLocal) {
        fprintf(stderr, "emulated CUDA device: only cudaStreamCaptureModeThreadLocal capture "
                        "is emulated\n");
        return ret(cudaErrorInvalidValue);
    }
    st->cap = new capture_t();
    st->cap->thread = pthread_self();
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph) {
    sg_emu_guard g;
    stream_t *st = stream_of(s);
    if (!st->cap) return ret(cudaErrorIllegalState);
    if (!capturing_here(st)) return ret(cudaErrorStreamCaptureWrongThread);
    capture_t *c = st->cap;
    st->cap = nullptr;
    *graph = nullptr;
    if (c->invalid) {
        fprintf(stderr, "emulated CUDA device: capture invalidated by %s\n", c->why.c_str());
        delete c;
        return ret(cudaErrorStreamCaptureInvalidated);
    }
    graph_t *gr = new graph_t();
    gr->work = std::move(c->work);
    delete c;
    *graph = (cudaGraph_t)gr;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph,
                                 unsigned long long flags) {
    sg_emu_guard g;
    (void)flags;
    if (!graph) return ret(cudaErrorInvalidValue);
    graph_t *copy = new graph_t(*(graph_t *)graph);
    *exec = (cudaGraphExec_t)copy;
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
    sg_emu_guard g;
    graph_t *gr = (graph_t *)exec;
    stream_t *st = stream_of(s);
    if (!gr || !st->live) return ret(cudaErrorInvalidResourceHandle);
    counts.graph_launches++;
    for (const work_t &w : gr->work) {
        cudaError_t e = issue(st, w);
        if (e != cudaSuccess) return ret(e);
    }
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    sg_emu_guard g;
    delete (graph_t *)exec;
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    sg_emu_guard g;
    delete (graph_t *)graph;
    return cudaSuccess;
}

} // extern "C"
