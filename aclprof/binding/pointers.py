"""pyACL-style calls: int handles in, ints and strings out, no cffi object escaping.

The pyACL-compatible layer (:mod:`aclprof.compat.acl`) speaks pyACL's conventions, where
every pointer is an int (0 is NULL) and out-parameters come back as return values. This
module turns those ints into C pointers and back, so that the compat layer, like every
layer above the binding, never holds a cffi object. Arguments of :func:`call` are passed
through unchanged except for the markers below:

- :class:`Ptr` (from :func:`ptr`): an int address cast to a C pointer type;
- :class:`Out`: an out-parameter of a pointer type (``"uint32_t *"``, ``"aclrtStream *"``);
  its value comes back in the list :func:`call` returns (pointers as int addresses);
- :class:`TextOut`: a zeroed ``char`` buffer of a given length, returned decoded;
- :class:`Array`: a C array built from a list (an empty list is NULL);
- :class:`IntCell`: a stable C ``int`` (the subscribe config's fd) passed by pointer.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from aclprof.binding.loader import get_library

__all__ = ["Ptr", "Out", "TextOut", "Array", "IntCell", "NULL", "ptr", "call", "call_ret",
           "call_ptr", "call_text", "call_void", "buffer_address", "read_bytes"]


class Ptr(NamedTuple):
    """An int address to pass as a C pointer of type ``ctype``."""

    address: int
    ctype: str = "void *"


class Out(NamedTuple):
    """An out-parameter of pointer type ``ctype``; :func:`call` returns what it points to."""

    ctype: str


class TextOut(NamedTuple):
    """A zeroed ``char[length]`` out-parameter; :func:`call` returns it as a str."""

    length: int


class Array(NamedTuple):
    """A C array of type ``ctype`` (``"uint32_t[]"``) holding ``values``; empty is NULL."""

    ctype: str
    values: list[int]


NULL = Ptr(0)


def ptr(address: int, ctype: str = "void *") -> Ptr:
    """An int handle as a C pointer argument (0 is NULL); TypeError if not an int."""
    if isinstance(address, bool) or not isinstance(address, int):
        raise TypeError(f"pointer arguments are ints, not {type(address).__name__}")
    return Ptr(address, ctype)


class IntCell:
    """A C ``int`` that stays at one address for as long as this object lives.

    The library keeps the pointer of a subscribe config's fd cell and writes -1 into it
    when it closes the fd, possibly after the config is gone: the owner keeps the cell.
    """

    __slots__ = ("_cell",)

    def __init__(self, value: int):
        self._cell = get_library().ffi.new("int *", value)

    @property
    def value(self) -> int:
        return int(self._cell[0])


def _address(ffi: Any, cdata: Any) -> int:
    return int(ffi.cast("uintptr_t", cdata))


def _convert(ffi: Any, args: tuple[Any, ...]) -> tuple[list[Any], list[tuple[Any, Any]]]:
    converted: list[Any] = []
    outs: list[tuple[Any, Any]] = []  # (marker, cdata) of each out-parameter, in order
    for arg in args:
        if isinstance(arg, Ptr):
            converted.append(ffi.cast(arg.ctype, arg.address))
        elif isinstance(arg, Out):
            cdata = ffi.new(arg.ctype)
            outs.append((arg, cdata))
            converted.append(cdata)
        elif isinstance(arg, TextOut):
            cdata = ffi.new("char[]", arg.length)
            outs.append((arg, cdata))
            converted.append(cdata)
        elif isinstance(arg, Array):
            converted.append(ffi.new(arg.ctype, arg.values) if arg.values else ffi.NULL)
        elif isinstance(arg, IntCell):
            converted.append(arg._cell)
        else:
            converted.append(arg)
    return converted, outs


def _out_value(ffi: Any, marker: Any, cdata: Any) -> Any:
    if isinstance(marker, TextOut):
        return ffi.string(cdata).decode("utf-8", "backslashreplace")
    if ffi.typeof(cdata).item.kind == "pointer":  # a handle: pyACL gives it as an int
        return _address(ffi, cdata[0])
    return int(cdata[0])


def call(name: str, *args: Any) -> tuple[int, list[Any]]:
    """Call C function ``name``; returns its int result and the out-parameters' values."""
    lib = get_library()
    ffi = lib.ffi
    converted, outs = _convert(ffi, args)
    result = lib.fn(name)(*converted)
    return int(result), [_out_value(ffi, marker, cdata) for marker, cdata in outs]


def call_ret(name: str, *args: Any) -> int:
    """Call a C function returning an int (``aclError``, a count) and return it."""
    return call(name, *args)[0]


def call_ptr(name: str, *args: Any) -> int:
    """Call a C function returning a pointer; returns it as an int address (NULL is 0)."""
    lib = get_library()
    converted, _ = _convert(lib.ffi, args)
    return _address(lib.ffi, lib.fn(name)(*converted))


def call_text(name: str, *args: Any) -> str | None:
    """Call a C function returning ``const char *``; None for NULL."""
    lib = get_library()
    ffi = lib.ffi
    converted, _ = _convert(ffi, args)
    value = lib.fn(name)(*converted)
    return None if value == ffi.NULL else ffi.string(value).decode("utf-8", "replace")


def call_void(name: str, *args: Any) -> None:
    """Call a C function returning nothing."""
    lib = get_library()
    converted, _ = _convert(lib.ffi, args)
    lib.fn(name)(*converted)


def buffer_address(data: bytes) -> int:
    """The address of a bytes object's buffer (valid while the object lives)."""
    ffi = get_library().ffi
    return _address(ffi, ffi.from_buffer(data))


def read_bytes(address: int, size: int) -> bytes:
    """A copy of ``size`` bytes at ``address``."""
    ffi = get_library().ffi
    return bytes(ffi.buffer(ffi.cast("char *", address), size))
