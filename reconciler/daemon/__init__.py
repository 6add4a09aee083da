"""The daemon below the CLI: its typed settings (``settings.py``) and the composition root that
wires and runs the parts (``assembly.py``). ``reconciler run`` only turns its flags into
``DaemonSettings``; nothing here imports the CLI or click.
"""
