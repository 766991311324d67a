/* io/tfevents.h - TensorBoard event files (scalars only), written by the
 * trainer's rank 0 under <run_dir>/tb/.
 *
 * The format TensorBoard reads (tensorboard/summary/writer/record_writer.py,
 * tensorflow/core/util/event.proto, summary.proto):
 *  - a file events.out.tfevents.<unix time>.<host>.<pid>.<n> (n counts the
 *    files this process opened, so two runs in one second never collide) of
 *    TFRecords: uint64 length (little endian), uint32 masked CRC32C of those
 *    8 bytes, the data, uint32 masked CRC32C of the data; masked(c) =
 *    ((c >> 15) | (c << 17)) + 0xa282ead8;
 *  - each record one `Event` protobuf: wall_time (1, double), step (2,
 *    int64), and either file_version (3, "brain.Event:2", the first record),
 *    session_log (6, status START) or summary (5) holding one
 *    Summary.Value {tag (1), simple_value (2, float)}.
 * The protobuf fields are encoded by hand (varint, fixed64, fixed32,
 * length-delimited): no protobuf library is needed for five fields.
 *
 * A resumed run opens a new file (TensorBoard reads every file of the
 * directory in name order); its first event after the version is a
 * SessionLog START at the resume step, which tells TensorBoard to drop the
 * points the interrupted run had logged after that step.
 *
 * Owns its FILE. Writes are buffered; sg_tb_flush pushes them to the file
 * (the trainer calls it at every log interval). After a failed write the
 * writer logs one warning naming the file and errno and ignores further
 * events (training goes on; metrics.jsonl still has every value).
 * scripts/read_tfevents.py is an independent reader (standard library only).
 */
#ifndef SG_IO_TFEVENTS_H
#define SG_IO_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef struct sg_tb_writer sg_tb_writer;

/* Creates dir (and parents) and a new event file in it holding the version
 * record and a SessionLog START at start_step. NULL after logging the path
 * and errno. */
sg_tb_writer *sg_tb_open(const char *dir, int64_t start_step);
/* One scalar (stored as float32, as TensorBoard does). NaN and infinities
 * are written as they are. */
void sg_tb_scalar(sg_tb_writer *w, int64_t step, const char *tag, double value);
/* SG_OK, or SG_ERR_RUNTIME after the one warning (the writer is then off). */
sg_status sg_tb_flush(sg_tb_writer *w);
/* Flushes and closes; NULL is allowed. */
void sg_tb_close(sg_tb_writer *w);
/* The file's path ("" for NULL). */
const char *sg_tb_path(const sg_tb_writer *w);

/* CRC32C (Castagnoli, reflected polynomial 0x82f63b78), continuing from crc
 * (0 to start): the checksum TFRecord uses. zlib's crc32 is another one. */
uint32_t sg_crc32c(uint32_t crc, const void *data, size_t n);

#endif
