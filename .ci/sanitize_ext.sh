#!/usr/bin/env bash
# One of aclprof.protocol's C extensions under ASan/UBSan, as the mock's C code is: built apart with
# the sanitizers, loaded by its tests in place of the installed build (through an environment
# variable the test file reads), with the runtimes preloaded into python. The pytest script, as
# .ci/run runs it: `-m pytest` would import the unbuilt checkout first.
#   .ci/sanitize_ext.sh _jsonl tests/test_records_encoder.py ACLPROF_JSONL_SANITIZED      (record encoder)
#   .ci/sanitize_ext.sh _reccodec tests/test_storage_codec.py ACLPROF_RECCODEC_SANITIZED  (storage codec)
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 MODULE TEST_FILE ENV_VAR" >&2; exit 2; }
module=$1 tests=$2 var=$3
cd "$(dirname "$0")/.."
CC=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
inc=$(python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
ext=$(python -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
"$CC" -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined \
    -std=c11 -Wall -Wextra -Werror -shared -fPIC -I"$inc" -Icdefs "aclprof/protocol/$module.c" -o "$tmp/$module$ext"
env "$var=$tmp/$module$ext" \
    LD_PRELOAD="$("$CC" -print-file-name=libasan.so):$("$CC" -print-file-name=libubsan.so)" \
    ASAN_OPTIONS=detect_leaks=0 \
    "$(command -v pytest)" -q -p no:randomly -p no:cacheprovider "$tests"
