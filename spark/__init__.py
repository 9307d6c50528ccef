"""The PySpark side of rmqdelay: the store data source and the analysis jobs."""
