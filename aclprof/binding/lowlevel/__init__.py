"""A 1:1 layer over every C function aclprof binds, for users who need exact C semantics.

Each function calls one C function, takes and returns Python values (ints, str, bytes and
owning handle objects, never cffi objects), and raises through the one error funnel
(:func:`aclprof.binding.errors.check`). Functions whose C form returns a value with no error code
(``aclprofGetOpStart`` ...) return that value unchanged, 0 on error, as C does.

Arguments are checked in Python first (types and integer ranges) so that a wrong argument
gives a ``TypeError``/``ValueError`` naming the parameter instead of a cffi overflow.
The library is loaded on the first call (see :mod:`aclprof.binding.loader`).

What differs between CANN releases (hicann/runtime d8beaaf09 "2025" and 681ef7610 "2026";
the mock follows either, see ``aclprof.mock.set_cann_era``):

=====================================  ==========================  ========================
call                                   2025                        2026
=====================================  ==========================  ========================
finalize / stop without init           100043                      success, no-op
start without init                     100043                      auto-init (ACL_PROF_PATH
                                                                   or "./"), kept even if
                                                                   the config is refused
start(None) / stop(None)               100000                      default / running config
                                                                   (default: the opened
                                                                   devices, no host)
start while running, same types        100042 if a device repeats  success, starts nothing
start while running, other types       100042 if a device repeats  100010
stop                                   stops config's devices      stops every device
set_config before init                 100001                      accepted
set_config 15, 16 / HOST_SYS numa     100000 / 100010             accepted
init: result directory                 created at init             created at start
DataType.API_STATS / AICORE_SHAPE      200007 at start             accepted
range_stop of a never-started id       success                     -1 (MsproftxError)
aclprofMarkEx length                   1..127 bytes                1..155 (``mark_ex``
                                                                   allows 127 in both)
=====================================  ==========================  ========================

In both: ``set_config`` while only subscriptions exist gives 100010; on a 910B, types 11, 13,
14 give 100010 and 15 gives 100000 whatever the value; msproftx works from the first MSPROFTX
start until ``finalize`` (between stop and finalize nothing collects the events).

The functions live in one module per area; this package re-exports them all, so
``aclprof.lowlevel`` and ``aclprof.binding.lowlevel`` are the names to import:

- :mod:`.session`: init/finalize/start/stop, configs, ``aclprofSetConfig`` and its value rules
- :mod:`.subscribe`: subscribe configs, the fd cell, the op getters
- :mod:`.step`: step info
- :mod:`.msproftx`: stamps, marks, push/pop, ranges, the tensor-info extension
- :mod:`.runtime`: ``aclInit``, devices, contexts, streams, models, datasets, data buffers
- :mod:`.validate`: the argument checks and byte limits they share
"""

from __future__ import annotations

from aclprof.binding.lowlevel.msproftx import (
    Stamp,
    create_stamp,
    destroy_stamp,
    mark,
    mark_ex,
    pop,
    push,
    range_pop,
    range_push_ex,
    range_start,
    range_stop,
    set_stamp_trace_message,
    str2id,
)
from aclprof.binding.lowlevel.runtime import (
    Context,
    DataBuffer,
    Dataset,
    Stream,
    acl_create_data_buffer,
    acl_destroy_data_buffer,
    acl_finalize,
    acl_init,
    mdl_add_dataset_buffer,
    mdl_create_dataset,
    mdl_destroy_dataset,
    mdl_execute,
    mdl_get_dataset_num_buffers,
    mdl_load_from_file,
    mdl_unload,
    rt_create_context,
    rt_create_stream,
    rt_destroy_context,
    rt_destroy_stream,
    rt_get_current_context,
    rt_get_device,
    rt_get_device_count,
    rt_reset_device,
    rt_set_current_context,
    rt_set_device,
    rt_synchronize_device,
    rt_synchronize_stream,
)
from aclprof.binding.lowlevel.session import (
    INVALID_PATH_CHARS as INVALID_PATH_CHARS,
)
from aclprof.binding.lowlevel.session import (
    SET_CONFIG_RANGES as SET_CONFIG_RANGES,
)
from aclprof.binding.lowlevel.session import (
    SET_CONFIG_WORD_LISTS as SET_CONFIG_WORD_LISTS,
)
from aclprof.binding.lowlevel.session import (
    SET_CONFIG_WORDS as SET_CONFIG_WORDS,
)
from aclprof.binding.lowlevel.session import (
    STORAGE_LIMIT_MB as STORAGE_LIMIT_MB,
)
from aclprof.binding.lowlevel.session import (
    ProfConfig,
    create_config,
    destroy_config,
    finalize,
    init,
    set_config,
    start,
    stop,
)
from aclprof.binding.lowlevel.session import (
    _release_config as _release_config,
)
from aclprof.binding.lowlevel.session import (
    check_set_config_value as check_set_config_value,
)
from aclprof.binding.lowlevel.session import (
    invalid_path_char as invalid_path_char,
)
from aclprof.binding.lowlevel.step import (
    StepInfoHandle,
    create_step_info,
    destroy_step_info,
    get_step_timestamp,
)
from aclprof.binding.lowlevel.subscribe import (
    FdCell,
    SubscribeConfig,
    create_subscribe_config,
    destroy_subscribe_config,
    get_model_id,
    get_op_attri_value,
    get_op_desc_size,
    get_op_duration,
    get_op_end,
    get_op_flag,
    get_op_name,
    get_op_name_len,
    get_op_num,
    get_op_start,
    get_op_times,
    get_op_type,
    get_op_type_len,
    model_subscribe,
    model_unsubscribe,
)
from aclprof.binding.lowlevel.validate import (
    MAX_CONFIG_VALUE_BYTES as MAX_CONFIG_VALUE_BYTES,
)
from aclprof.binding.lowlevel.validate import (
    MAX_DEVICES as MAX_DEVICES,
)
from aclprof.binding.lowlevel.validate import (
    MAX_MARK_EX_BYTES as MAX_MARK_EX_BYTES,
)
from aclprof.binding.lowlevel.validate import (
    MAX_PATH_BYTES as MAX_PATH_BYTES,
)
from aclprof.binding.lowlevel.validate import (
    MAX_TRACE_MESSAGE_BYTES as MAX_TRACE_MESSAGE_BYTES,
)
from aclprof.binding.lowlevel.validate import (
    _int as _int,
)
from aclprof.binding.lowlevel.validate import (
    _u32 as _u32,
)
from aclprof.binding.lowlevel.validate import (
    encode_text as encode_text,
)

# The names above that are not in __all__ are the limits and checks the api layer and the
# tests use (``_int``, ``_u32``, ``_release_config`` among them): they stay importable from
# here as they were from the one module. Module state (``msproftx._push_ex_buffers``) is
# not re-exported: a copy here would not follow reassignment; read it from its module.

__all__ = [
    # session
    "init", "finalize", "start", "stop", "create_config", "destroy_config", "set_config",
    "ProfConfig",
    # subscription
    "FdCell", "SubscribeConfig", "create_subscribe_config", "destroy_subscribe_config",
    "model_subscribe", "model_unsubscribe", "get_op_desc_size", "get_op_num",
    "get_op_type_len", "get_op_type", "get_op_name_len", "get_op_name", "get_op_start",
    "get_op_end", "get_op_duration", "get_model_id", "get_op_flag", "get_op_attri_value",
    "get_op_times",
    # step info
    "StepInfoHandle", "create_step_info", "get_step_timestamp", "destroy_step_info",
    # msproftx
    "Stamp", "create_stamp", "destroy_stamp", "set_stamp_trace_message", "mark", "push", "pop",
    "range_start", "range_stop", "mark_ex", "str2id", "range_push_ex", "range_pop",
    # runtime
    "Context", "Stream", "acl_init", "acl_finalize", "rt_set_device", "rt_reset_device",
    "rt_get_device", "rt_get_device_count", "rt_create_context", "rt_destroy_context",
    "rt_set_current_context", "rt_get_current_context", "rt_create_stream", "rt_destroy_stream",
    "rt_synchronize_stream", "rt_synchronize_device", "mdl_load_from_file", "mdl_execute",
    "mdl_unload",
    # model datasets
    "Dataset", "DataBuffer", "mdl_create_dataset", "mdl_destroy_dataset",
    "mdl_add_dataset_buffer", "mdl_get_dataset_num_buffers", "acl_create_data_buffer",
    "acl_destroy_data_buffer",
]
