"""Clef backends, one module each, imported lazily by `clef.client.make_backend`:
`workers_ai`, `self_hosted` (over `http`), `local` (the in-process engine), `ray_pool` and `off`."""
