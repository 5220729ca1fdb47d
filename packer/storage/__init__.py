"""Object storage: `s3://` URLs (url), the client and what its errors mean (client), the
bounded local cache of remote parts shared by the processes of a machine (cache), and
objects fetched whole (fetch). Packing into a bucket is packer.packing.to_s3; reading a
remote dataset is packer.read.remote.

boto3 is the client: the AWS SDK itself, so endpoint, region and credentials are found
exactly as the AWS CLI finds them (AWS_ENDPOINT_URL for any S3-compatible store), its
transfer manager makes multipart uploads, and it is imported only when an s3:// URL is
used (the `s3` extra installs it).
"""
