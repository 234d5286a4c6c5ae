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
	//         "s3:GetBucketLocation"
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
	//         "s3:GetObject"
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
	//         "s3:CreateBucket"
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
	//         "s3:AbortMultipartUpload",
	//         "s3:ListMultipartUploadParts"
	//       ],
	//       "Resource": [
	//         "arn:aws:s3:::photos/*"
	//       ]
	//     }
	//   ]
	// }
}
