package controller

import (
	"context"
	"fmt"
	"net/url"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/notification"
)

// MinIOWebhookID is the name of the webhook notification target hoard
// starts MinIO with (MINIO_NOTIFY_WEBHOOK_*_HOARD), pointing at the
// controller's /v1/events.
const MinIOWebhookID = "HOARD"

// MinIONotifier sets a MinIO bucket's notification configuration so that
// every object created in it is posted to the controller by MinIO's
// webhook target MinIOWebhookID.
type MinIONotifier struct {
	client *minio.Client
	region string
}

// NewMinIONotifier talks to the MinIO at endpoint ("http://host:port").
func NewMinIONotifier(endpoint, accessKey, secretKey, region string) (*MinIONotifier, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("bad store endpoint %q", endpoint)
	}
	c, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(accessKey, secretKey, ""), Secure: u.Scheme == "https", Region: region})
	if err != nil {
		return nil, err
	}
	return &MinIONotifier{client: c, region: region}, nil
}

// EnableNotifications sends the bucket's ObjectCreated events to the
// controller. One configuration per bucket, without filters: the
// controller matches triggers itself, and S3 refuses overlapping filters.
func (n *MinIONotifier) EnableNotifications(ctx context.Context, bucket string) error {
	q := notification.NewConfig(notification.NewArn("minio", "sqs", "", MinIOWebhookID, "webhook"))
	q.AddEvents(notification.ObjectCreatedAll)
	var cfg notification.Configuration
	cfg.AddQueue(q)
	return n.client.SetBucketNotification(ctx, bucket, cfg)
}
