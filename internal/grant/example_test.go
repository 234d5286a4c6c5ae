package grant_test

import (
	"fmt"

	"github.com/hoard-io/hoard/internal/grant"
)

// The policy of an application that writes photos and reads models: what
// an operator attaches to its identity at a store hoard cannot make
// identities in (AWS S3), and what hoard gives its MinIO user.
func ExamplePolicy() {
	p, err := grant.Policy([]grant.Bucket{{Name: "photos", Access: grant.ReadWrite}, {Name: "models", Access: grant.ReadOnly}})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(p))
	// Output:
	// {
	//   "Version": "2012-10-17",
	//   "Statement": [
	//     {
	//       "Sid": "ReadBuckets",
	//       "Effect": "Allow",
	//       "Action": [
	//         "s3:ListBucket",
	//         "s3:GetBucketLocation",
	//         "s3:ListBucketVersions",
	//         "s3:GetBucketVersioning",
	//         "s3:GetBucketTagging",
	//         "s3:GetBucketObjectLockConfiguration",
	//         "s3:GetLifecycleConfiguration",
	//         "s3:GetBucketCors",
	//         "s3:GetEncryptionConfiguration",
	//         "s3:ListenBucketNotification"
	//       ],
	//       "Resource": [
	//         "arn:aws:s3:::models",
	//         "arn:aws:s3:::photos"
	//       ]
	//     },
	//     {
	//       "Sid": "ReadObjects",
	//       "Effect": "Allow",
	//       "Action": [
	//         "s3:GetObject",
	//         "s3:GetObjectVersion",
	//         "s3:GetObjectAttributes",
	//         "s3:GetObjectVersionAttributes",
	//         "s3:GetObjectTagging",
	//         "s3:GetObjectVersionTagging",
	//         "s3:GetObjectRetention",
	//         "s3:GetObjectLegalHold"
	//       ],
	//       "Resource": [
	//         "arn:aws:s3:::models/*",
	//         "arn:aws:s3:::photos/*"
	//       ]
	//     },
	//     {
	//       "Sid": "WriteBuckets",
	//       "Effect": "Allow",
	//       "Action": [
	//         "s3:ListBucketMultipartUploads",
	//         "s3:CreateBucket",
	//         "s3:PutBucketVersioning",
	//         "s3:PutBucketTagging",
	//         "s3:PutBucketObjectLockConfiguration",
	//         "s3:PutLifecycleConfiguration",
	//         "s3:PutBucketCors",
	//         "s3:DeleteBucketCors",
	//         "s3:PutEncryptionConfiguration"
	//       ],
	//       "Resource": [
	//         "arn:aws:s3:::photos"
	//       ]
	//     },
	//     {
	//       "Sid": "WriteObjects",
	//       "Effect": "Allow",
	//       "Action": [
	//         "s3:PutObject",
	//         "s3:DeleteObject",
	//         "s3:DeleteObjectVersion",
	//         "s3:AbortMultipartUpload",
	//         "s3:ListMultipartUploadParts",
	//         "s3:PutObjectTagging",
	//         "s3:PutObjectVersionTagging",
	//         "s3:DeleteObjectTagging",
	//         "s3:DeleteObjectVersionTagging",
	//         "s3:PutObjectRetention",
	//         "s3:PutObjectLegalHold"
	//       ],
	//       "Resource": [
	//         "arn:aws:s3:::photos/*"
	//       ]
	//     }
	//   ]
	// }
}
