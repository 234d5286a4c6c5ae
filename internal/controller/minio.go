package controller

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/minio/madmin-go/v3"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/notification"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/grant"
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

// NewMinIONotifier talks to the MinIO at endpoint ("http://host:port";
// an https endpoint with tc's TLS, nil: the system's roots).
func NewMinIONotifier(endpoint, accessKey, secretKey, region string, tc *tls.Config) (*MinIONotifier, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("bad store endpoint %q", endpoint)
	}
	c, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(accessKey, secretKey, ""), Secure: u.Scheme == "https", Region: region, Transport: minioTransport(tc)})
	if err != nil {
		return nil, err
	}
	return &MinIONotifier{client: c, region: region}, nil
}

// EnableNotifications sends the bucket's ObjectCreated events (for
// triggers) and ObjectRemoved events (for the change relay, ADR 0033) to
// the controller. One configuration per bucket, without filters: the
// controller matches triggers itself, and S3 refuses overlapping filters.
func (n *MinIONotifier) EnableNotifications(ctx context.Context, bucket string) error {
	q := notification.NewConfig(notification.NewArn("minio", "sqs", "", MinIOWebhookID, "webhook"))
	q.AddEvents(notification.ObjectCreatedAll, notification.ObjectRemovedAll)
	var cfg notification.Configuration
	cfg.AddQueue(q)
	return n.client.SetBucketNotification(ctx, bucket, cfg)
}

// MinIOIdentities makes each application a MinIO user through MinIO's
// admin API: an access key of its own, and a policy named
// hoard-app-APP (grant.Policy of its buckets) attached to it. The
// controller's keys must be MinIO's root keys or an admin's.
type MinIOIdentities struct {
	adm *madmin.AdminClient
}

// NewMinIOIdentities talks to the admin API of the MinIO at endpoint
// ("http://host:port"; an https endpoint with tc's TLS, nil: the
// system's roots).
func NewMinIOIdentities(endpoint, accessKey, secretKey string, tc *tls.Config) (*MinIOIdentities, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("bad store endpoint %q", endpoint)
	}
	adm, err := madmin.NewWithOptions(u.Host, &madmin.Options{Creds: credentials.NewStaticV4(accessKey, secretKey, ""), Secure: u.Scheme == "https", Transport: minioTransport(tc)})
	if err != nil {
		return nil, err
	}
	return &MinIOIdentities{adm: adm}, nil
}

// minioTransport is the transport of the controller's MinIO clients: nil
// (the client's default) without TLS settings.
func minioTransport(tc *tls.Config) http.RoundTripper {
	if tc == nil {
		return nil
	}
	return &http.Transport{Proxy: http.ProxyFromEnvironment, TLSClientConfig: tc.Clone(), TLSHandshakeTimeout: 10 * time.Second,
		ResponseHeaderTimeout: time.Minute, IdleConnTimeout: 90 * time.Second}
}

// minioPolicyName is the name of app's policy in MinIO.
func minioPolicyName(app string) string { return "hoard-app-" + app }

// Grant sets app's policy to its buckets (a redeploy with other buckets
// replaces it in place) and makes sure its user exists with current's
// keys, or with new ones, and has the policy attached.
func (m *MinIOIdentities) Grant(ctx context.Context, app string, buckets []grant.Bucket, current api.StoreKeys) (api.StoreKeys, error) {
	policy, err := grant.Policy(buckets)
	if err != nil {
		return api.StoreKeys{}, err
	}
	name := minioPolicyName(app)
	if err := m.adm.AddCannedPolicy(ctx, name, policy); err != nil {
		return api.StoreKeys{}, fmt.Errorf("store identity: policy %s: %w", name, err)
	}
	keys := current
	if keys.AccessKey == "" || keys.SecretKey == "" {
		keys = api.StoreKeys{AccessKey: "HA" + strings.ToUpper(randHex(9)), SecretKey: randHex(20)}
	}
	// Setting the user again is harmless, and brings back one removed
	// behind the controller's back.
	if err := m.adm.AddUser(ctx, keys.AccessKey, keys.SecretKey); err != nil {
		return api.StoreKeys{}, fmt.Errorf("store identity: user for %s: %w", app, err)
	}
	info, err := m.adm.GetUserInfo(ctx, keys.AccessKey)
	if err != nil {
		return api.StoreKeys{}, fmt.Errorf("store identity: user for %s: %w", app, err)
	}
	if !slices.Contains(strings.Split(info.PolicyName, ","), name) {
		if _, err := m.adm.AttachPolicy(ctx, madmin.PolicyAssociationReq{Policies: []string{name}, User: keys.AccessKey}); err != nil {
			return api.StoreKeys{}, fmt.Errorf("store identity: attaching %s: %w", name, err)
		}
	}
	return keys, nil
}

// Revoke removes app's user and policy.
func (m *MinIOIdentities) Revoke(ctx context.Context, app string, keys api.StoreKeys) error {
	if keys.AccessKey != "" {
		if err := m.adm.RemoveUser(ctx, keys.AccessKey); err != nil && !minioAdminCode(err, "XMinioAdminNoSuchUser") {
			return fmt.Errorf("store identity: removing the user of %s: %w", app, err)
		}
	}
	if err := m.adm.RemoveCannedPolicy(ctx, minioPolicyName(app)); err != nil && !minioAdminCode(err, "XMinioAdminNoSuchPolicy") {
		return fmt.Errorf("store identity: removing the policy of %s: %w", app, err)
	}
	return nil
}

func minioAdminCode(err error, code string) bool {
	var e madmin.ErrorResponse
	return errors.As(err, &e) && e.Code == code
}
