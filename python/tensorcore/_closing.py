"""close() on leaving a `with` block and at garbage collection, for the
classes that own native resources (each defines an idempotent close())."""


class Closing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # a finalizer must not raise (Context.__del__ retries what it can)
            pass
