"""What the tools answer that the layers below the service compute: the estimate and hardware results
(estimate/ fills them), the dataset report (preflight/dataset/ fills it), and how a job's ending reads
(endings.py: verdict words, blocking alerts, the fix no retry mends, a next step). Pure models and their
markdown, below everything that builds them, so the server declares its tools with them at start
without importing what computes them.
"""
