"""What the tools answer that the layers below the service compute: the estimate and hardware results
(estimate/ fills them) and the dataset report (preflight/dataset/ fills it). Pure models and their
markdown, below everything that builds them, so the server declares its tools with them at start
without importing what computes them.
"""
