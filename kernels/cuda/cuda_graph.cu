/* kernels/cuda/cuda_graph.cu - graph ops of the CUDA backend (backend.h:
 * set_step_key, graph_begin, graph_end, graph_launch, graph_free).
 *
 * A graph is a CUDA graph recorded from the compute stream with stream
 * capture (cudaStreamBeginCapture in thread-local mode: other threads, the
 * DDP comm thread or a loader, keep calling the runtime as before) and
 * instantiated once; a launch replays every recorded kernel, memset and
 * copy with the arguments it had when recorded.
 *
 * What a replay must see anew each time travels through device memory: the
 * step key lives in a device word (cu->step_key_dev) that set_step_key
 * writes with a one-thread kernel issued on the compute stream, so it is
 * ordered like any op, before the graph launched after it, and dropout_fwd
 * reads it when it runs (cuda_elem.cu).
 *
 * Memory: a graph holds raw device pointers (tensors, the cuDNN workspace,
 * the bf16 copies, reduction scratch). The backend counts every allocation
 * and free of its own (cu->mem_gen, cuda_memory.cu); a graph recorded at an
 * older generation may point at freed memory, and graph_launch refuses it
 * (returns -1) so the caller records anew. Allocating, waiting for the
 * device or reading a value back while recording is a fatal error naming
 * the op (sg_cu_no_capture): a graph cannot contain it, and a silent
 * failure would leave a step half recorded.
 */
#include <stdint.h>
#include <stdlib.h>

#include "core/log.h"
#include "kernels/cuda/cuda_internal.h"

typedef struct sg_cuda_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    uint64_t mem_gen; /* cu->mem_gen when recorded */
} sg_cuda_graph;

__global__ void k_set_step_key(uint64_t *dst, uint64_t key) { *dst = key; }

static void sg_cuda_set_step_key(sg_backend *be, uint64_t key) {
    sg_cuda *cu = sg_cu(be);
    SG_LAUNCH(1, 1, 0, sg_cu_stream(be), k_set_step_key)(cu->step_key_dev, key);
    CU_LAUNCH_CHECK("k_set_step_key");
}

static void sg_cuda_graph_begin(sg_backend *be) {
    sg_cuda *cu = sg_cu(be);
    SG_CU_ENTER(cu);
    SG_CHECK(!cu->capturing, "CUDA backend: graph_begin while a graph is being recorded already "
                             "(graph_begin twice without graph_end: a bug in the caller)");
    CU_CHECK(
        cudaStreamBeginCapture(cu->streams[SG_STREAM_COMPUTE], cudaStreamCaptureModeThreadLocal));
    cu->capturing = 1;
    cu->capture_gen = cu->mem_gen;
}

static void *sg_cuda_graph_end(sg_backend *be) {
    sg_cuda *cu = sg_cu(be);
    SG_CU_ENTER(cu);
    SG_CHECK(cu->capturing, "CUDA backend: graph_end without graph_begin (a bug in the caller)");
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(cu->streams[SG_STREAM_COMPUTE], &graph);
    cu->capturing = 0;
    if (e != cudaSuccess)
        sg_cuda_fail("cudaStreamEndCapture(compute stream)", __FILE__, __LINE__,
                     cudaGetErrorName(e), cudaGetErrorString(e),
                     "an op issued while recording the graph used a stream or event outside "
                     "it, or the recording was invalidated; set cuda.graphs: false and report "
                     "this line");
    /* sg_cu_no_capture stops every allocation while recording, so the
     * generation cannot have moved; checked because a graph over moved
     * memory would corrupt tensors silently */
    SG_CHECK(cu->mem_gen == cu->capture_gen,
             "CUDA backend: device memory was allocated or freed while a graph was recorded "
             "(internal error); set cuda.graphs: false");
    sg_cuda_graph *g = (sg_cuda_graph *)calloc(1, sizeof *g);
    SG_CHECK(g != NULL, "CUDA backend: out of host memory for a graph");
    g->graph = graph;
    g->mem_gen = cu->mem_gen;
    e = cudaGraphInstantiate(&g->exec, graph, 0);
    if (e != cudaSuccess)
        sg_cuda_fail("cudaGraphInstantiate", __FILE__, __LINE__, cudaGetErrorName(e),
                     cudaGetErrorString(e),
                     "the driver refused the recorded graph; set cuda.graphs: false and report "
                     "this line with nvidia-smi's driver version");
    cu->graph_captures++;
    return g;
}

static int sg_cuda_graph_launch(sg_backend *be, void *handle) {
    sg_cuda *cu = sg_cu(be);
    SG_CU_ENTER(cu);
    SG_CHECK(handle != NULL, "CUDA backend: graph_launch of NULL (a bug in the caller)");
    SG_CHECK(!cu->capturing, "CUDA backend: graph_launch while a graph is being recorded");
    sg_cuda_graph *g = (sg_cuda_graph *)handle;
    if (g->mem_gen != cu->mem_gen) return -1; /* recorded over memory that moved since */
    CU_CHECK(cudaGraphLaunch(g->exec, cu->streams[SG_STREAM_COMPUTE]));
    cu->graph_launches++;
    return 0;
}

static void sg_cuda_graph_free(sg_backend *be, void *handle) {
    if (!handle) return;
    SG_CU_ENTER(sg_cu(be));
    sg_cuda_graph *g = (sg_cuda_graph *)handle;
    /* a launched graph may still run: its exec is freed after it */
    CU_CHECK(cudaStreamSynchronize(sg_cu(be)->streams[SG_STREAM_COMPUTE]));
    CU_CHECK(cudaGraphExecDestroy(g->exec));
    CU_CHECK(cudaGraphDestroy(g->graph));
    free(g);
}

void sg_cuda_fill_graph_ops(sg_ops *o) {
    o->set_step_key = sg_cuda_set_step_key;
    o->graph_begin = sg_cuda_graph_begin;
    o->graph_end = sg_cuda_graph_end;
    o->graph_launch = sg_cuda_graph_launch;
    o->graph_free = sg_cuda_graph_free;
}
