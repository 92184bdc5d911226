"""Charts, tables, the HTML report and the dashboard's selection logic, from stored captures."""
