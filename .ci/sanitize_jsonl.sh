#!/usr/bin/env bash
# The daemon's C record encoder (aclprof/protocol/_jsonl.c) under ASan/UBSan, as the mock's C
# code is: built apart with the sanitizers, loaded by tests/test_records_encoder.py in place
# of the installed build (ACLPROF_JSONL_SANITIZED), with the runtimes preloaded into python. The
# pytest script, as .ci/run runs it: `-m pytest` would import the unbuilt checkout first.
set -euo pipefail
cd "$(dirname "$0")/.."
CC=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
inc=$(python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
ext=$(python -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
"$CC" -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined \
    -std=c11 -Wall -Wextra -Werror -shared -fPIC -I"$inc" -Icdefs aclprof/protocol/_jsonl.c -o "$tmp/_jsonl$ext"
ACLPROF_JSONL_SANITIZED="$tmp/_jsonl$ext" \
    LD_PRELOAD="$("$CC" -print-file-name=libasan.so):$("$CC" -print-file-name=libubsan.so)" \
    ASAN_OPTIONS=detect_leaks=0 \
    "$(command -v pytest)" -q -p no:randomly -p no:cacheprovider tests/test_records_encoder.py
