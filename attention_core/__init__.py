"""The torch-free base that ``kernels/`` and ``profiler/`` share: one attention problem (Shape) and its
row key, the step, mode and dtype names, the costing an implementation declares, the split-KV plan
the decode kernel and the cost model both follow, and the model presets.

Nothing here imports torch, triton or the file system, and nothing here imports ``kernels`` or
``profiler``: the layers point one way, ``attention_core`` <- ``kernels`` <- ``profiler``.
"""
