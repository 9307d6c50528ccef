"""`rmqdelay analyze` through spark-submit, which then decides the master and resources:

    spark-submit --master spark://host:7077 "$(python -c 'import rmqdelay.spark.submit as s; print(s.__file__)')" \
        lateness broker-a=/data/a/store broker-b=/data/b/store --output /data/out

Arguments are those of `rmqdelay analyze` (KIND STORE... and its options); `--spark` is implied.
Executors need rmqdelay installed (the same Python environment, PYSPARK_PYTHON).
"""

import sys

from rmqdelay.commands.main import main

if __name__ == "__main__":
    sys.argv = ["rmqdelay", "analyze", *sys.argv[1:], "--spark"]
    main()
