"""The robot as data: each build a description (``builds/*.toml``, :mod:`.registry`), its MuJoCo
models (:mod:`.model`), and the vendor's low-level interface (:mod:`.unitree`)."""
