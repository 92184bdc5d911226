"""The cost model and the roofline: FLOPs and bytes per implementation and step (naive, fused,
cost), datasheet peaks (hardware), roofs and one model row per measurement (roofs, rows). Pure
functions of their arguments: no torch, no files."""
