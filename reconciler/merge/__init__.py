"""What merging a pull request does to each cluster (``reconciler plan``, docs/plan.md): the
decisions and their rendering (``plan.py``), pure, with the prediction from the planner's own model
on the cluster's settings as the controller reads them."""
