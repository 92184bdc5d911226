"""The dashboard's tabs, one module each with ``render(ctx)``: roofline, scaling, bandwidth, step_breakdown,
compare, trace, whatif, validation, observed. profiler/views/dashboard_app.py lays out the page and the
sidebar, builds the :class:`~profiler.views.tabs.context.Context` once per run and hands it to each tab;
what the tabs read through Streamlit's cache is in loaders.py. Selection and ranking live in
profiler.views.selection, figures in profiler.views.plots, rooflines and observed: a tab is widgets only."""
