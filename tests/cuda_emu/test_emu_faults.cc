/* tests/cuda_emu/test_emu_faults.cc - the emulated device's own checks, each
 * planted in a tiny kernel (test-only C++17, compiled like the kernel files:
 * emu.h force-included).
 *
 * Every case runs in a child process (a fault is the device's sticky error
 * for the rest of a process) and must end with the error and the line on
 * stderr the device gives for it; a control case next to each plant must
 * run clean, so a check that fires on everything fails too. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

__global__ void k_fill(float *y, int n, float v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = v;
}
__global__ void k_fill_one_past(float *y, int n, float v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) y[i] = v; /* the plant: <= */
}
__global__ void k_copy(const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
__global__ void k_half_barrier(float *y) {
    if (threadIdx.x < 16) __syncthreads(); /* the plant: not every thread gets here */
    y[threadIdx.x] = 1.0f;
}
__global__ void k_full_barrier(float *y) {
    __shared__ float sh[64];
    sh[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    y[threadIdx.x] = sh[blockDim.x - 1 - threadIdx.x];
}
__global__ void k_shuffle(float *y) {
    float v = __shfl_down_sync(0xffffffffu, (float)threadIdx.x, 1);
    y[threadIdx.x] = v;
}
__global__ void k_read_unwritten_shared(float *y) {
    __shared__ float sh[32];
    y[threadIdx.x] = sh[threadIdx.x]; /* never written: poisoned */
}

static float *dev(int n) {
    float *p = NULL;
    if (cudaMalloc((void **)&p, (size_t)n * sizeof(float)) != cudaSuccess) exit(3);
    return p;
}
static int finish(void) { return (int)cudaDeviceSynchronize(); }

/* the cases: each returns the error the device reported (0 = none) */
static int oob_write(int plant) {
    float *y = dev(100);
    if (plant) SG_LAUNCH(1, 128, 0, 0, k_fill_one_past)(y, 100, 1.0f);
    else SG_LAUNCH(1, 128, 0, 0, k_fill)(y, 100, 1.0f);
    return finish();
}
static int host_pointer(int plant) {
    float *host = (float *)malloc(32 * sizeof(float));
    SG_LAUNCH(1, 32, 0, 0, k_fill)(plant ? host : dev(32), 32, 1.0f);
    return finish();
}
static int barrier(int plant) {
    float *y = dev(64);
    if (plant) SG_LAUNCH(1, 32, 0, 0, k_half_barrier)(y);
    else SG_LAUNCH(1, 64, 0, 0, k_full_barrier)(y);
    int e = finish();
    float h[64];
    if (!plant && !e) {
        cudaMemcpy(h, y, sizeof h, cudaMemcpyDeviceToHost);
        for (int i = 0; i < 64; i++)
            if (h[i] != (float)(63 - i)) return 100; /* the barrier did not order */
    }
    return e;
}
static int shuffle(int plant) {
    float *y = dev(32);
    SG_LAUNCH(1, plant ? 16 : 32, 0, 0, k_shuffle)(y); /* 16: lanes 16-31 do not exist */
    int e = finish();
    float h[32];
    if (!plant && !e) {
        cudaMemcpy(h, y, sizeof h, cudaMemcpyDeviceToHost);
        for (int i = 0; i < 32; i++)
            if (h[i] != (float)(i < 31 ? i + 1 : 31)) return 100;
    }
    return e;
}
static int streams(int plant) {
    cudaStream_t a, b;
    cudaEvent_t ev;
    cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    float *x = dev(64), *y = dev(64);
    cudaDeviceSynchronize();
    SG_LAUNCH(1, 64, 0, a, k_fill)(x, 64, 2.0f);
    cudaEventRecord(ev, a);
    if (!plant) cudaStreamWaitEvent(b, ev, 0); /* the plant: no wait */
    SG_LAUNCH(1, 64, 0, b, k_copy)(x, y, 64);
    int e = finish();
    float h[64];
    if (!plant && !e) {
        cudaMemcpy(h, y, sizeof h, cudaMemcpyDeviceToHost);
        for (int i = 0; i < 64; i++)
            if (h[i] != 2.0f) return 100;
    }
    return e;
}
static int launch_config(int plant) {
    float *y = dev(32);
    SG_LAUNCH(1, plant ? 2048 : 32, 0, 0, k_fill)(y, 32, 1.0f);
    int e = (int)cudaGetLastError();
    return e ? e : finish();
}
/* not faults: what the device guarantees a test can see */
static int poisoned_shared(int plant) {
    (void)plant;
    float *y = dev(32), h[32];
    SG_LAUNCH(1, 32, 0, 0, k_read_unwritten_shared)(y);
    cudaMemcpy(h, y, sizeof h, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 32; i++)
        if (!isnan(h[i])) return 100;
    return finish();
}
static int deferred(int plant) {
    (void)plant;
    float *y = dev(4), *pin = NULL;
    cudaMallocHost((void **)&pin, 4 * sizeof(float));
    pin[0] = 5.0f;
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    SG_LAUNCH(1, 4, 0, s, k_fill)(y, 4, 7.0f);
    cudaMemcpyAsync(pin, y, 4 * sizeof(float), cudaMemcpyDeviceToHost, s);
    if (pin[0] != 5.0f) return 100; /* ran before any synchronisation */
    cudaStreamSynchronize(s);
    if (pin[0] != 7.0f) return 101;
    return finish();
}

struct tcase {
    const char *name;
    int (*fn)(int);
    int plant_error;    /* cudaError_t the plant must end with (0: none) */
    const char *expect; /* in its stderr */
};
static const tcase cases[] = {
    {"oob_write", oob_write, cudaErrorIllegalAddress, "wrote outside the 400-byte allocation"},
    {"host_pointer", host_pointer, cudaErrorIllegalAddress, "argument 0,"},
    {"barrier_divergence", barrier, cudaErrorLaunchFailure,
     "__syncthreads reached by 16 threads while 16 had ended"},
    {"shuffle_missing_lane", shuffle, cudaErrorLaunchFailure, "does not exist"},
    {"streams_unordered", streams, cudaErrorLaunchFailure, "nothing orders the two"},
    {"launch_config", launch_config, cudaErrorInvalidConfiguration, "invalid configuration"},
    {"shared_poisoned", poisoned_shared, 0, ""},
    {"deferred_until_sync", deferred, 0, ""},
};

/* runs fn(plant) in a child; its exit status (the error's low byte) and
 * stderr */
static int run_child(int (*fn)(int), int plant, std::string *err) {
    int p[2];
    if (pipe(p) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 2);
        close(p[0]);
        _exit(fn(plant) & 0xff);
    }
    close(p[1]);
    char buf[4096];
    ssize_t r;
    while ((r = read(p[0], buf, sizeof buf)) > 0) err->append(buf, (size_t)r);
    close(p[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 200;
}

int main(void) {
    int failed = 0;
    for (const tcase &c : cases) {
        std::string err;
        int clean = run_child(c.fn, 0, &err);
        bool ok = clean == 0 && err.find("emulated CUDA device:") == std::string::npos;
        if (!ok)
            fprintf(stderr, "FAIL %s (control): exit %d, stderr:\n%s", c.name, clean, err.c_str());
        if (c.plant_error) {
            std::string perr;
            int planted = run_child(c.fn, 1, &perr);
            bool caught = planted == (c.plant_error & 0xff) &&
                          perr.find(c.expect) != std::string::npos;
            if (!caught)
                fprintf(stderr, "FAIL %s (planted): exit %d (want %d), want \"%s\" in:\n%s", c.name,
                        planted, c.plant_error & 0xff, c.expect, perr.c_str());
            ok = ok && caught;
        }
        printf("%s %s\n", ok ? "ok  " : "FAIL", c.name);
        failed += !ok;
    }
    printf("%d of %zu cases passed\n", (int)(sizeof cases / sizeof *cases) - failed,
           sizeof cases / sizeof *cases);
    return failed ? 1 : 0;
}
