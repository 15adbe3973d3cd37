"""`python -m tensorcore`: prints the library version, where it was loaded
from, and each usable device with its capabilities (a smoke check)."""

import sys

import tensorcore as tc


def _describe(device):
    try:
        ctx = tc.Context(device)
    except tc.TensorcoreError as e:
        print("%-5s unavailable (%s)" % (device, e))
        return False
    with ctx:
        info = ctx.device_info()
        caps = ctx.runtime_capabilities()
        names = [name for name, bit in sorted(tc.CAPABILITY_ALIASES.items(), key=lambda kv: kv[1])
                 if tc.capability_available(caps, bit)]
        print("%-5s %s [%s] backend=%s units=%d memory=%.1f GiB" % (
            device, info.name, info.family, info.backend_name, info.compute_units, info.memory_bytes / 2**30))
        if info.features:
            print("      features: %s" % info.features)
        print("      capabilities (v%d): %s" % (caps.version, ", ".join(names) or "none"))
    return True


def main():
    print(tc.version())
    print("library: %s" % tc.library_path)
    ok = [_describe(device) for device in ("cpu", "cuda")]
    return 0 if any(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
