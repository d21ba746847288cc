"""Rollscope's dashboard: a Gradio app over the engine and its store.

``dashboard.app.build_app(db)`` builds it, ``dashboard.app.launch(db)`` serves
it. Importing this package does not import Gradio, so the pure HTML views in
``dashboard.views`` stay cheap to use from tests and scripts.
"""
