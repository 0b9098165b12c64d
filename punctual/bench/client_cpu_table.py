"""Client CPU of one botocore call at one vCPU, per call type: written by bench/measure_client_cpu.py
(rerun it to refresh; do not edit by hand). ``base_ms + per_item_ms x items``; items are what
punctual/bench/cpu.py counts for the call (entries, keys, returned rows)."""

CONDITIONS = '2026-12-07, Intel(R) Xeon(R) Processor, Python 3.11.7, botocore 1.44.18, HTTPS keep-alive to a local server in another process, 2000 calls per case after 50 of warm-up, time.process_time(); dynamodb.TransactWriteItems measured 2026-12-07, Intel(R) Xeon(R) Processor, Python 3.11.7, botocore 1.44.18, HTTPS keep-alive to a local server in another process, 2000 calls per case after 50 of warm-up, time.process_time()'

OPS = {'dynamodb.BatchGetItem': {'base_ms': 0.9577, 'measured': {1: 1.0058, 100: 5.7724}, 'per_item_ms': 0.04815},
 'dynamodb.BatchWriteItem': {'base_ms': 0.988, 'measured': {1: 1.008, 25: 1.4883}, 'per_item_ms': 0.02001},
 'dynamodb.DeleteItem': {'base_ms': 0.9939, 'measured': {1: 0.9939}, 'per_item_ms': 0.0},
 'dynamodb.GetItem': {'base_ms': 1.1697, 'measured': {1: 1.1697}, 'per_item_ms': 0.0},
 'dynamodb.PutItem': {'base_ms': 1.0005, 'measured': {1: 1.0005}, 'per_item_ms': 0.0},
 'dynamodb.Query': {'base_ms': 0.9214, 'measured': {1: 0.9534, 100: 4.118}, 'per_item_ms': 0.03197},
 'dynamodb.TransactWriteItems': {'base_ms': 1.2862,
                                 'measured': {1: 1.364, 100: 9.0617},
                                 'per_item_ms': 0.07775},
 'dynamodb.UpdateItem': {'base_ms': 1.0551, 'measured': {1: 1.0551}, 'per_item_ms': 0.0},
 'events.DescribeRule': {'base_ms': 0.9047, 'measured': {1: 0.9047}, 'per_item_ms': 0.0},
 'events.PutRule': {'base_ms': 0.9232, 'measured': {1: 0.9232}, 'per_item_ms': 0.0},
 'sqs.DeleteMessageBatch': {'base_ms': 1.4318, 'measured': {10: 1.4318}, 'per_item_ms': 0.0},
 'sqs.SendMessageBatch': {'base_ms': 0.9897, 'measured': {1: 1.0243, 10: 1.3359}, 'per_item_ms': 0.03462}}
