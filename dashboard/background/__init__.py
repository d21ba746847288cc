"""Work the dashboard runs beside Gradio's handlers: Launch's batches and Browse's demo build (``jobs``), Step's
hand-driven sessions (``stepping``), the Runs tab's watches of dump folders (``watching``).

Each runs in a thread of its own and is polled by its tab through a status copied under a lock. Imports the
engine's face alone; no Gradio, no tabs.
"""
