"""Application A: reads its own objects and reports their SHA-256."""

import hashlib

import boto3

s3 = boto3.client("s3")


def read(event, context):
    out = {}
    for key in event["keys"]:
        try:
            body = s3.get_object(Bucket=event["bucket"], Key=key)["Body"].read()
            out[key] = hashlib.sha256(body).hexdigest()
        except Exception as e:  # reported, and counted as a failed read
            out[key] = "error: %s: %s" % (type(e).__name__, e)
    return out
