"""Writing to the worker's input topics with kafka-python, for every process that is not the worker: the turns
topic (``compassmem produce``, ``POST /v1/turns``) and the control topic (forget and redaction commands from the
API, ``compassmem forget``/``redact`` and ``Memory``).

producer.py   ``TurnProducer``: turns (optionally paced) and commands, acknowledged by the broker
publisher.py  the publishing protocols the API and ``Memory`` depend on, and their Kafka implementation
command_answers.py  the worker's answer to one command, read back from the control topic
"""
