"""The dashboard's views: the HTML and figures each tab shows, as pure functions of records.

One module per tab (``tabs/<name>.py`` gets its HTML from ``views/<name>.py``), plus the pieces
several tabs share: ``html`` (escaping, chips, notes, badges), ``tokens`` (the token view),
``charts`` and ``run_charts`` (plotly figures), ``controls`` (the loop-knob table). No Gradio and
no store here, so tests and scripts use them without a server.
"""
