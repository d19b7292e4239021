from clef_pipelines.cli.main import app

app()
