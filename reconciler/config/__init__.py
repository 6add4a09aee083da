"""The one owner of ``reconciler.yaml`` (docs/configuration.md): ``document.load`` parses and
validates a file once (``validation``: the parse layer, the JSON Schema and each section's rules)
and keeps the located findings; ``settings.resolve`` types every section for one cluster into a
frozen ``ClusterSettings`` (``sync``, ``rollout``, ``health``, ``windows``, ``promotion``,
``firmware``, ``notify``, ``forge``, ``signatures``), each by the ``from_obj`` of the package that
owns the section's type. ``reconciler.settings`` publishes the result at every commit.

Pure: no Kubernetes, Git, clock or network (``.importlinter``)."""
