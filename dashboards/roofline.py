"""Launcher of the dashboard in a checkout: runs the app the package ships, profiler/views/dashboard_app.py,
as if Streamlit had been given that file, so the documented command keeps working:

    streamlit run dashboards/roofline.py [-- --reports DIR --select NAME]

Its arguments, its default (reports/ of this checkout, or $ATTN_REPORTS) and everything it draws are the app's
(see its docstring). Installed from a wheel: `attention-roofline dashboard --reports DIR`.
"""

import runpy
from pathlib import Path

runpy.run_path(str(Path(__file__).resolve().parents[1] / "profiler" / "views" / "dashboard_app.py"),
               run_name="__main__")
