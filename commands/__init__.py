"""The command line: Typer apps that parse arguments, call the core and render with rich."""
