"""jobtrail: an MCP server for fine-tuning jobs with preflight checks and attempt receipts."""

__version__ = "0.1.0"
