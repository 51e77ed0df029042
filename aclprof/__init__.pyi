# The public names of ``aclprof``, written once. Type checkers read this stub in place of
# __init__.py; at run time __init__.py reads the same lines to resolve each name lazily
# (``import aclprof`` loads no C library, no cffi and no numpy). One line per name, in the
# form ``from aclprof.<module> import Name as Name`` (the explicit re-export); a submodule
# reachable as an attribute is ``from aclprof import sub as sub``.

from aclprof import agent as agent
from aclprof import api as api
from aclprof import binding as binding
from aclprof import cli as cli
from aclprof import compat as compat
from aclprof import demo as demo
from aclprof import lowlevel as lowlevel
from aclprof import mock as mock
from aclprof import protocol as protocol
from aclprof.api.failures import FailureWatch as FailureWatch
from aclprof.api.failures import OpFailure as OpFailure
from aclprof.api.failures import TensorDesc as TensorDesc
from aclprof.api.failures import watch_failures as watch_failures
from aclprof.api.markers import RangeHandle as RangeHandle
from aclprof.api.markers import annotate as annotate
from aclprof.api.markers import mark as mark
from aclprof.api.markers import pop as pop
from aclprof.api.markers import push as push
from aclprof.api.markers import range as range
from aclprof.api.markers import set_strict as set_strict
from aclprof.api.records import OpBatch as OpBatch
from aclprof.api.records import OpRecord as OpRecord
from aclprof.api.requests import Request as Request
from aclprof.api.requests import request as request
from aclprof.api.session import Profiler as Profiler
from aclprof.api.step import StepInfo as StepInfo
from aclprof.api.subscription import Subscription as Subscription
from aclprof.api.subscription import SubscriptionStats as SubscriptionStats
from aclprof.api.subscription import subscribe as subscribe
from aclprof.binding.enums import AicoreMetrics as AicoreMetrics
from aclprof.binding.enums import ConfigType as ConfigType
from aclprof.binding.enums import DataType as DataType
from aclprof.binding.enums import OpFlag as OpFlag
from aclprof.binding.enums import StepTag as StepTag
from aclprof.binding.errors import AclError as AclError
from aclprof.binding.errors import AclprofError as AclprofError
from aclprof.binding.errors import ApiConflictError as ApiConflictError
from aclprof.binding.errors import FeatureUnsupportedError as FeatureUnsupportedError
from aclprof.binding.errors import HandleClosedError as HandleClosedError
from aclprof.binding.errors import InvalidFileError as InvalidFileError
from aclprof.binding.errors import InvalidModelIdError as InvalidModelIdError
from aclprof.binding.errors import InvalidParamError as InvalidParamError
from aclprof.binding.errors import InvalidProfilingConfigError as InvalidProfilingConfigError
from aclprof.binding.errors import LibraryNotFoundError as LibraryNotFoundError
from aclprof.binding.errors import ModulesUnsupportedError as ModulesUnsupportedError
from aclprof.binding.errors import MsproftxError as MsproftxError
from aclprof.binding.errors import OtherAclError as OtherAclError
from aclprof.binding.errors import ProfAlreadyRunError as ProfAlreadyRunError
from aclprof.binding.errors import ProfilingFailureError as ProfilingFailureError
from aclprof.binding.errors import ProfNotRunError as ProfNotRunError
from aclprof.binding.errors import RepeatInitializeError as RepeatInitializeError
from aclprof.binding.errors import RepeatSubscribeError as RepeatSubscribeError
from aclprof.binding.errors import UninitializeError as UninitializeError
from aclprof.binding.errors import UnsupportedError as UnsupportedError
from aclprof.binding.loader import LibraryInfo as LibraryInfo
from aclprof.binding.loader import library_info as library_info
from aclprof.binding.loader import use_mock as use_mock

__version__: str
