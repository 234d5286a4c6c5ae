//go:build integration

package rig

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/controller"
	"github.com/hoard-io/hoard/internal/store"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

// Two tenants: A owns ta-data, B owns tb-data. B's function, with the S3
// credentials the platform gives it, tries everything against A's data
// and the platform's bucket; so does a client holding B's store
// identity, straight against MinIO.
const tenantSpec = `
name: %s
memory: 96MiB
timeout: 30s
keep_alive: 1h
max_instances: 1
buckets: {%s: read-write}
cache: {budget: 16MiB}
functions:
  attack: {handler: fns.attack}
`

// attack runs each attempt through the instance's cachelet and reports
// "ok" or the S3 error code; list_buckets reports what it listed.
const tenantFns = `
import json
import boto3, botocore

s3 = boto3.client("s3")

def part_copy(own, victim):
    up = s3.create_multipart_upload(Bucket=own, Key="stolen.bin")["UploadId"]
    try:
        s3.upload_part_copy(Bucket=own, Key="stolen.bin", UploadId=up, PartNumber=1,
                            CopySource={"Bucket": victim, "Key": "secret.txt"})
    finally:
        s3.abort_multipart_upload(Bucket=own, Key="stolen.bin", UploadId=up)

def attack(event, context):
    a, own = event["victim"], event["own"]
    pkg, meta = event["package"], event["meta"]
    attempts = {
        "list A's objects": lambda: s3.list_objects_v2(Bucket=a),
        "list A's objects (v1)": lambda: s3.list_objects(Bucket=a),
        "head A's bucket": lambda: s3.head_bucket(Bucket=a),
        "read A's object": lambda: s3.get_object(Bucket=a, Key="secret.txt")["Body"].read(),
        "head A's object": lambda: s3.head_object(Bucket=a, Key="secret.txt"),
        "overwrite A's object": lambda: s3.put_object(Bucket=a, Key="secret.txt", Body=b"pwned"),
        "add to A's bucket": lambda: s3.put_object(Bucket=a, Key="planted.txt", Body=b"pwned"),
        "delete A's object": lambda: s3.delete_object(Bucket=a, Key="secret.txt"),
        "delete A's objects (batch)": lambda: s3.delete_objects(Bucket=a, Delete={"Objects": [{"Key": "secret.txt"}]}),
        "copy A's object out": lambda: s3.copy_object(Bucket=own, Key="stolen.txt", CopySource={"Bucket": a, "Key": "secret.txt"}),
        "copy over A's object": lambda: s3.copy_object(Bucket=a, Key="secret.txt", CopySource={"Bucket": own, "Key": "mine.txt"}),
        "multipart into A's bucket": lambda: s3.create_multipart_upload(Bucket=a, Key="mp.bin"),
        "create a bucket": lambda: s3.create_bucket(Bucket="tb-new-bucket"),
        "create A's bucket again": lambda: s3.create_bucket(Bucket=a),
        "delete A's bucket": lambda: s3.delete_bucket(Bucket=a),
        "delete its own bucket": lambda: s3.delete_bucket(Bucket=own),
        "read A's code package": lambda: s3.get_object(Bucket="hoard-platform", Key=pkg)["Body"].read(),
        "list the platform bucket": lambda: s3.list_objects_v2(Bucket="hoard-platform"),
        "read A's access metadata": lambda: s3.get_object(Bucket="hoard-platform", Key=meta)["Body"].read(),
        "rewrite A's access metadata": lambda: s3.put_object(Bucket="hoard-platform", Key=meta, Body=b"[]"),
        "presigned read of A's object": lambda: __import__("urllib.request").request.urlopen(
            s3.generate_presigned_url("get_object", Params={"Bucket": a, "Key": "secret.txt"}), timeout=10).read(),
        # Operations passed through to the store are held to the same grants.
        "list A's versions": lambda: s3.list_object_versions(Bucket=a),
        "read A's object by version": lambda: s3.get_object(Bucket=a, Key="secret.txt", VersionId="null")["Body"].read(),
        "read A's object part": lambda: s3.get_object(Bucket=a, Key="secret.txt", PartNumber=1)["Body"].read(),
        "A's object attributes": lambda: s3.get_object_attributes(Bucket=a, Key="secret.txt", ObjectAttributes=["ETag"]),
        "read A's tags": lambda: s3.get_object_tagging(Bucket=a, Key="secret.txt"),
        "tag A's object": lambda: s3.put_object_tagging(Bucket=a, Key="secret.txt", Tagging={"TagSet": []}),
        "delete A's object version": lambda: s3.delete_object(Bucket=a, Key="secret.txt", VersionId="null"),
        "A's uploads": lambda: s3.list_multipart_uploads(Bucket=a),
        "read A's bucket policy": lambda: s3.get_bucket_policy(Bucket=a),
        "make A's bucket public": lambda: s3.put_bucket_policy(Bucket=a, Policy=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"AWS": ["*"]},
            "Action": ["s3:GetObject"], "Resource": ["arn:aws:s3:::" + a + "/*"]}]})),
        "version A's bucket": lambda: s3.put_bucket_versioning(Bucket=a, VersioningConfiguration={"Status": "Enabled"}),
        "copy A's object version out": lambda: s3.copy_object(Bucket=own, Key="stolen.txt",
            CopySource={"Bucket": a, "Key": "secret.txt", "VersionId": "null"}),
        "part-copy A's object out": lambda: part_copy(own, a),
        "read the platform's tags": lambda: s3.get_object_tagging(Bucket="hoard-platform", Key=pkg),
        "read a platform version": lambda: s3.get_object(Bucket="hoard-platform", Key=pkg, VersionId="null")["Body"].read(),
    }
    out = {}
    for name, f in attempts.items():
        try:
            f()
            out[name] = "ok"
        except botocore.exceptions.ClientError as e:
            out[name] = e.response["Error"]["Code"]
        except Exception as e:  # urllib's HTTPError
            out[name] = getattr(e, "code", repr(e))
    out["list_buckets"] = sorted(b["Name"] for b in s3.list_buckets()["Buckets"])
    # What B may do, it can: its identity works.
    s3.put_object(Bucket=own, Key="mine.txt", Body=b"b's own")
    out["own"] = s3.get_object(Bucket=own, Key="mine.txt")["Body"].read().decode()
    return out
`

func deployTenant(t *testing.T, e *env, name, bucket string) {
	t.Helper()
	e.deployCode(t, strings.NewReplacer("%s: read-write", bucket+": read-write", "name: %s", "name: "+name).Replace(tenantSpec), tenantFns)
}

func TestTenantsCannotReachEachOther(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	for _, b := range []string{"ta-data", "tb-data"} {
		if err := e.st.CreateBucket(ctx, b, ""); err != nil {
			t.Fatal(err)
		}
	}
	const secret = "A's secret"
	e.put(t, "ta-data", "secret.txt", secret)
	deployTenant(t, e, "ta", "ta-data")
	deployTenant(t, e, "tb", "tb-data")
	var pkgKey string
	for _, a := range e.p.Controller.Apps() {
		if a.Name == "ta" {
			pkgKey = "apps/ta/" + a.Rev + ".tar.gz"
		}
	}
	const metaKey = "meta/ta/20260101T000000Z-ta-1.json"
	e.put(t, "hoard-platform", metaKey, `{"objects": []}`)
	platformBefore := listAll(t, e.st, "hoard-platform")

	// Through B's cachelet, with B's function's own credentials.
	rec := invoke(t, e.p.Controller, "tb", "attack", map[string]string{"victim": "ta-data", "own": "tb-data", "package": pkgKey, "meta": metaKey})
	if !rec.OK {
		t.Fatalf("the attack function failed: %+v\n%s", rec.Error, rec.Log)
	}
	var out map[string]any
	if err := json.Unmarshal(rec.Result, &out); err != nil {
		t.Fatal(err)
	}
	if out["own"] != "b's own" {
		t.Errorf("B cannot use its own bucket: %v", out["own"])
	}
	listed, _ := json.Marshal(out["list_buckets"])
	if string(listed) != `["tb-data"]` {
		t.Errorf("B's ListBuckets = %s, want its own bucket only", listed)
	}
	delete(out, "own")
	delete(out, "list_buckets")
	names := make([]string, 0, len(out))
	for n := range out {
		names = append(names, n)
	}
	sort.Strings(names)
	succeeded := 0
	for _, n := range names {
		res := out[n]
		t.Logf("through the cachelet: %-30s -> %v", n, res)
		switch res {
		case "AccessDenied", "403", float64(403):
		default:
			succeeded++
			t.Errorf("through the cachelet: %s: %v, want AccessDenied", n, res)
		}
	}
	if len(names) < 20 || succeeded != 0 {
		t.Errorf("%d of %d attempts through the cachelet succeeded", succeeded, len(names))
	}

	// Straight to MinIO with B's store identity, bypassing the cachelet.
	keysB := storeKeys(t, e, "tb")
	if keysB.AccessKey == "" || keysB.AccessKey == e.cfg.StoreAccessKey {
		t.Fatalf("B's store identity: %q", keysB.AccessKey)
	}
	b, err := s3store.New(s3store.Config{Endpoint: e.minio.Endpoint(), AccessKey: keysB.AccessKey, SecretKey: keysB.SecretKey}, nil)
	if err != nil {
		t.Fatal(err)
	}
	body := func(s string) *strings.Reader { return strings.NewReader(s) }
	direct := []struct {
		name string
		do   func() error
	}{
		{"read A's object", func() error { return get(ctx, b, "ta-data", "secret.txt") }},
		{"head A's object", func() error { _, err := b.Stat(ctx, "ta-data", "secret.txt"); return err }},
		{"head A's bucket", func() error { return b.HeadBucket(ctx, "ta-data") }},
		{"delete A's objects (batch)", func() error {
			failed, err := b.DeleteMany(ctx, "ta-data", []string{"secret.txt"})
			if err == nil && len(failed) > 0 {
				err = failed["secret.txt"]
			}
			return err
		}},
		{"list A's objects", func() error { _, err := b.List(ctx, "ta-data", store.ListOptions{MaxKeys: 10}); return err }},
		{"overwrite A's object", func() error {
			_, err := b.Put(ctx, "ta-data", "secret.txt", body("pwned"), 5, store.PutOptions{})
			return err
		}},
		{"delete A's object", func() error { return b.Delete(ctx, "ta-data", "secret.txt") }},
		{"copy A's object out", func() error {
			_, err := b.Copy(ctx, store.CopySource{Bucket: "ta-data", Key: "secret.txt"}, "tb-data", "stolen.txt", store.CopyOptions{})
			return err
		}},
		{"create a bucket", func() error { return b.CreateBucket(ctx, "tb-direct-bucket", "") }},
		{"delete A's bucket", func() error { return b.DeleteBucket(ctx, "ta-data") }},
		{"delete its own bucket", func() error { return b.DeleteBucket(ctx, "tb-data") }},
		{"read A's code package", func() error { return get(ctx, b, "hoard-platform", pkgKey) }},
		{"list the platform bucket", func() error {
			_, err := b.List(ctx, "hoard-platform", store.ListOptions{MaxKeys: 10})
			return err
		}},
		{"read A's access metadata", func() error { return get(ctx, b, "hoard-platform", metaKey) }},
		{"rewrite A's access metadata", func() error {
			_, err := b.Put(ctx, "hoard-platform", metaKey, body("[]"), 2, store.PutOptions{})
			return err
		}},
	}
	succeeded = 0
	for _, d := range direct {
		err := d.do()
		t.Logf("straight to MinIO:    %-30s -> %v", d.name, err)
		if err == nil {
			succeeded++
			t.Errorf("straight to MinIO: %s succeeded", d.name)
		}
	}
	if succeeded != 0 {
		t.Errorf("%d of %d attempts straight to MinIO succeeded", succeeded, len(direct))
	}
	buckets, err := b.ListBuckets(ctx)
	if err != nil {
		t.Logf("B's ListBuckets straight to MinIO: %v", err)
	}
	for _, bk := range buckets {
		if bk.Name != "tb-data" {
			t.Errorf("B's identity lists bucket %s", bk.Name)
		}
	}
	// B's identity does reach its own bucket: the refusals are its policy's.
	if err := get(ctx, b, "tb-data", "mine.txt"); err != nil {
		t.Errorf("B's identity cannot read its own bucket: %v", err)
	}

	// A's data, the platform's bucket and the bucket list are unchanged.
	if got, err := e.get("ta-data", "secret.txt"); err != nil || got != secret {
		t.Errorf("A's object: %q, %v", got, err)
	}
	if keys := listAll(t, e.st, "ta-data"); !slices.Equal(keys, []string{"secret.txt"}) {
		t.Errorf("A's bucket holds %v", keys)
	}
	if keys := listAll(t, e.st, "tb-data"); slices.Contains(keys, "stolen.txt") {
		t.Errorf("A's object was copied into B's bucket: %v", keys)
	}
	if after := listAll(t, e.st, "hoard-platform"); !slices.Equal(after, platformBefore) {
		t.Errorf("the platform bucket changed: %v -> %v", platformBefore, after)
	}
	if got, _ := e.get("hoard-platform", metaKey); got != `{"objects": []}` {
		t.Errorf("A's access metadata: %q", got)
	}
	all, err := e.st.ListBuckets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, bk := range all {
		if strings.HasPrefix(bk.Name, "tb-new") || strings.HasPrefix(bk.Name, "tb-direct") {
			t.Errorf("bucket %s was created", bk.Name)
		}
	}

	// A redeploy with other buckets changes what the same keys reach:
	// A's bucket, now read-only, can be read but no longer written.
	keysA := storeKeys(t, e, "ta")
	dir := t.TempDir()
	spec := strings.NewReplacer("%s: read-write", "ta-data: read-only", "name: %s", "name: ta").Replace(tenantSpec)
	if err := os.WriteFile(filepath.Join(dir, appspec.FileName), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fns.py"), []byte(tenantFns), 0o644); err != nil {
		t.Fatal(err)
	}
	pkg, err := appspec.Pack(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.Controller.Deploy(ctx, pkg.Data); err != nil {
		t.Fatal(err)
	}
	if again := storeKeys(t, e, "ta"); again != keysA {
		t.Errorf("the redeploy changed A's store keys")
	}
	a, err := s3store.New(s3store.Config{Endpoint: e.minio.Endpoint(), AccessKey: keysA.AccessKey, SecretKey: keysA.SecretKey}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := get(ctx, a, "ta-data", "secret.txt"); err != nil {
		t.Errorf("A cannot read its read-only bucket: %v", err)
	}
	if _, err := a.Put(ctx, "ta-data", "after.txt", body("x"), 1, store.PutOptions{}); err == nil {
		t.Error("A wrote to its bucket after it became read-only")
	}

	// Removing B revokes its identity.
	if err := e.p.Controller.Remove(ctx, "tb"); err != nil {
		t.Fatal(err)
	}
	if err := get(ctx, b, "tb-data", "mine.txt"); err == nil {
		t.Error("B's identity still works after B was removed")
	}
}

// storeKeys is app's store identity as the controller recorded it.
func storeKeys(t *testing.T, e *env, app string) api.StoreKeys {
	t.Helper()
	resp, err := e.p.etcd.Get(context.Background(), controller.EtcdApps+app)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("%s's record: %v", app, err)
	}
	var rec controller.Record
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
		t.Fatal(err)
	}
	return rec.Store
}

func get(ctx context.Context, st store.Store, bucket, key string) error {
	body, _, _, err := st.Get(ctx, bucket, key, store.GetOptions{})
	if err == nil {
		body.Close()
	}
	return err
}

func listAll(t *testing.T, st store.Store, bucket string) []string {
	t.Helper()
	page, err := st.List(context.Background(), bucket, store.ListOptions{MaxKeys: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range page.Objects {
		out = append(out, o.Key)
	}
	return out
}
