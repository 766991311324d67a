#!/bin/sh
# tests/cuda_emu/wrap-cu.sh NAME.cu OUT.cc - writes a .cc that includes
# kernels/cuda/NAME.cu, so that meson compiles the .cu file as C++ for the
# emulated device (meson picks the compiler by suffix).
printf '#include "kernels/cuda/%s"\n' "$1" > "$2"
