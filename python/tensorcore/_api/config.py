"""The environment switches (include/tensorcore/config.h): every variable
tensorcore and simpler read, declared once in the library, with its value
now. docs/configuration.md lists them."""

from ctypes import POINTER, byref, c_char_p, c_int32, c_int64

from .._errors import check
from .._lib import declare, tc_status, text
from .._structs import _Struct

__all__ = ["TCConfigSwitch", "config_switches", "config_value"]


class TCConfigSwitch(_Struct):
    """struct tc_config_switch."""
    _c_name_ = "struct tc_config_switch"
    _fields_ = [
        ("name", c_char_p),
        ("type", c_char_p),
        ("default_value", c_char_p),
        ("allowed", c_char_p),
        ("per_call", c_int32),
        ("description", c_char_p),
    ]


_tc_config_count = declare("tc_config_count", c_int32)
_tc_config_at = declare("tc_config_at", tc_status, c_int32, POINTER(TCConfigSwitch))
_tc_config_get = declare("tc_config_get", tc_status, c_char_p, POINTER(c_int64), POINTER(c_char_p), POINTER(c_int32))


def config_switches():
    """Every switch as a dict: name, type, default, allowed, per_call, description."""
    out = []
    for i in range(int(_tc_config_count())):
        s = TCConfigSwitch()
        check(_tc_config_at(i, byref(s)))
        out.append({"name": text(s.name), "type": text(s.type), "default": text(s.default_value),
                    "allowed": text(s.allowed), "per_call": bool(s.per_call), "description": text(s.description)})
    return out


def config_value(name):
    """(number, text, from_env) of switch `name` now: number is 0/1 for a bool,
    the value of an int, the index into `allowed` of an enum."""
    number, raw, from_env = c_int64(), c_char_p(), c_int32()
    check(_tc_config_get(name.encode(), byref(number), byref(raw), byref(from_env)))
    return int(number.value), text(raw.value), bool(from_env.value)
