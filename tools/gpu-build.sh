#!/usr/bin/env bash
# gpu-build.sh: builds drkernel on a GPU machine that has CUDA but none of the
# Debian libraries: unpacks the .deps.tar.xz made by the shared device-deps.sh
# script (git-ignored, carried along), points CMake at it, builds into build/.
# Source it (`. tools/gpu-build.sh`) so the library paths stay set for ctest.
set -e
if [ -f .deps.tar.xz ] && [ ! -d /tmp/deps/usr ]; then
  mkdir -p /tmp/deps && tar -C /tmp/deps -xJf .deps.tar.xz
fi
if [ -d /tmp/deps/usr ]; then
  DEPS=/tmp/deps/usr
  export PKG_CONFIG_PATH=$DEPS/lib/x86_64-linux-gnu/pkgconfig:$DEPS/lib/x86_64-linux-gnu/openblas-pthread/pkgconfig:${PKG_CONFIG_PATH:-}
  export CMAKE_PREFIX_PATH=$DEPS:${CMAKE_PREFIX_PATH:-}
  export CPATH=$DEPS/include:$DEPS/include/x86_64-linux-gnu:${CPATH:-}
  export LIBRARY_PATH=$DEPS/lib/x86_64-linux-gnu:${LIBRARY_PATH:-}
  export LD_LIBRARY_PATH=$DEPS/lib/x86_64-linux-gnu:$DEPS/lib/x86_64-linux-gnu/openblas-pthread:${LD_LIBRARY_PATH:-}
  export PATH=$DEPS/bin:$PATH
  # pkg-config files carry prefix=/usr; redirect them to the unpacked tree.
  export PKG_CONFIG_SYSROOT_DIR=/tmp/deps
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${DK_CMAKE_ARGS:-} >/dev/null
cmake --build build -j "$(nproc)" ${DK_BUILD_TARGETS:+--target $DK_BUILD_TARGETS}
set +e
