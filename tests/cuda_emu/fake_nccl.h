/* tests/cuda_emu/fake_nccl.h - the emulated NCCL's switch for tests
 * (tests/cuda_emu/fake_nccl.cc; only in -Demulated_cuda builds).
 */
#ifndef SG_TESTS_CUDA_EMU_FAKE_NCCL_H
#define SG_TESTS_CUDA_EMU_FAKE_NCCL_H

#ifdef __cplusplus
extern "C" {
#endif

/* The other ranks die: from now on no collective of any communicator,
 * those already queued included, completes until its communicator is
 * aborted (ncclCommAbort). Communicator k (k-th created in this process,
 * from 0) sees the death when bit k of seen_by is set: its
 * ncclCommGetAsyncError says ncclRemoteError; the others just hang, as a
 * collective whose peer never arrives does. */
void sg_emu_nccl_kill_peers(unsigned seen_by);

#ifdef __cplusplus
}
#endif

#endif
