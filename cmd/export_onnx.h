/* cmd/export_onnx.h - `segtrain export --format onnx` (cmd/export_onnx.c),
 * routed to from cmd/export.c. */
#ifndef SG_CMD_EXPORT_ONNX_H
#define SG_CMD_EXPORT_ONNX_H

/* 1 when argv asks for --format onnx (or --format=onnx), else 0. */
int sg_export_wants_onnx(int argc, char **argv);
/* The command: same argv as sg_cmd_export; returns the exit status. */
int sg_cmd_export_onnx(int argc, char **argv);

#endif
