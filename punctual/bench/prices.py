"""us-east-1 on-demand list prices used for the cost estimates (USD).

Written down on 2026-12-02 from the AWS pricing pages (and, for DynamoDB, the price cut
announced 2024-11-01 that halved on-demand throughput prices). Free tiers are ignored.
"""

from __future__ import annotations

PRICES_DATE = "2026-12-02"
PRICES_REGION = "us-east-1"

# DynamoDB on-demand (after the 2024-11-01 reduction): per request unit.
DDB_WRU = 0.625 / 1e6  # 1 WRU = one write of an item up to 1 KB (failed conditional writes count too)
DDB_RRU = 0.125 / 1e6  # 1 RRU = one strongly consistent read up to 4 KB (2 eventually consistent)
# DynamoDB Streams: GetRecords made by a Lambda trigger are free.
DDB_STREAM_READ_BY_LAMBDA = 0.0
# SQS standard: per request, each 64 KB chunk of a payload is one request.
SQS_REQUEST = 0.40 / 1e6
# SNS standard topic (direct delivery's control topic): per Publish request, each 64 KB chunk of a
# payload is one request; deliveries to Lambda functions are free.
SNS_PUBLISH = 0.50 / 1e6
SNS_CHUNK_BYTES = 65_536
SNS_DELIVERY_TO_LAMBDA = 0.0
# Lambda: per request + per GB-second (arm64, first tier).
LAMBDA_REQUEST = 0.20 / 1e6
LAMBDA_GB_S_ARM64 = 0.0000133334
# EventBridge: scheduled rules and PutRule/DisableRule control-plane calls are not billed.
EVENTBRIDGE_RULE_CALL = 0.0
# EventBridge Scheduler: per scheduled invocation (CreateSchedule API calls are not billed).
SCHEDULER_INVOCATION = 1.00 / 1e6
# CloudWatch Logs standard ingestion (the handlers log JSON lines and EMF metrics).
LOGS_PER_GB = 0.50

# CloudWatch (the fixed monthly costs, reported apart from the price per million tasks): a standard-resolution
# alarm, a custom metric (each name + dimension set; prorated by the hour, billed while it is emitted), a
# dashboard. The free tier (10 metrics, 10 alarms, 3 dashboards an account) is ignored, as everywhere here.
CLOUDWATCH_ALARM_MONTH = 0.10
CLOUDWATCH_METRIC_MONTH = 0.30
CLOUDWATCH_DASHBOARD_MONTH = 3.00
MONTH_HOURS = 730  # AWS's pricing month

SOURCES = {
    "DynamoDB": "aws.amazon.com/dynamodb/pricing/on-demand (2024-11-01 cut: $0.625/M WRU, $0.125/M RRU)",
    "SQS": "aws.amazon.com/sqs/pricing (standard queue, $0.40 per million requests, 64 KB chunks)",
    "SNS": "aws.amazon.com/sns/pricing (standard topics: $0.50 per million requests, each 64 KB chunk of published "
    "data a request; deliveries to AWS Lambda: no charge)",
    "Lambda": "aws.amazon.com/lambda/pricing ($0.20 per 1M requests; arm64 $0.0000133334 per GB-s)",
    "EventBridge Scheduler": "aws.amazon.com/eventbridge/pricing ($1.00 per million scheduled invocations)",
    "CloudWatch Logs": "aws.amazon.com/cloudwatch/pricing ($0.50 per GB ingested, standard class)",
    "CloudWatch": "aws.amazon.com/cloudwatch/pricing ($0.10 per standard-resolution alarm metric a month, $0.30 per "
    "custom metric a month for the first 10,000, prorated by the hour; $3.00 per dashboard a month)",
}
