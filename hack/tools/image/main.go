// oci-image writes an OCI image archive (a tar of an OCI image layout) from
// directory trees, without a container engine or a registry. Used by
// hack/image.sh (`make image`).
//
//	oci-image build --out FILE --name REF [--layer DIR]... [--owner PATH=UID:GID]...
//	                [--user U] [--workdir D] [--env K=V]... [--entrypoint ARG]...
//	                [--expose PORT/PROTO]... [--label K=V]... [--created RFC3339]
//	oci-image config FILE     prints the image configuration of an archive (JSON)
//
// Output is reproducible: entries in name order, every file owned by 0:0 unless
// --owner says otherwise, every timestamp set to --created.
package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: oci-image build|config ..."))
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = build(os.Args[2:])
	case "config":
		err = printConfig(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "oci-image:", err)
	os.Exit(1)
}

type owner struct{ uid, gid int }

func build(args []string) error {
	fl := flag.NewFlagSet("build", flag.ContinueOnError)
	out := fl.String("out", "", "archive to write")
	name := fl.String("name", "", "image reference recorded in the archive (e.g. docker.io/library/x:1)")
	user := fl.String("user", "", "config User")
	workdir := fl.String("workdir", "", "config WorkingDir")
	created := fl.String("created", "1970-01-01T00:00:00Z", "creation time of the image and of every file")
	var layers, owners, env, entrypoint, expose, labels list
	fl.Var(&layers, "layer", "directory whose tree becomes one layer (repeatable, bottom first)")
	fl.Var(&owners, "owner", "PATH=UID:GID for an entry of a layer (repeatable)")
	fl.Var(&env, "env", "K=V (repeatable)")
	fl.Var(&entrypoint, "entrypoint", "one argument of the entrypoint (repeatable)")
	fl.Var(&expose, "expose", "PORT/PROTO (repeatable)")
	fl.Var(&labels, "label", "K=V (repeatable)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *out == "" || *name == "" || len(layers) == 0 {
		return errors.New("build needs --out, --name and at least one --layer")
	}
	when, err := time.Parse(time.RFC3339, *created)
	if err != nil {
		return fmt.Errorf("--created: %w", err)
	}
	own := map[string]owner{}
	for _, o := range owners {
		p, ids, ok := strings.Cut(o, "=")
		u, g, ok2 := strings.Cut(ids, ":")
		uid, e1 := strconv.Atoi(u)
		gid, e2 := strconv.Atoi(g)
		if !ok || !ok2 || e1 != nil || e2 != nil {
			return fmt.Errorf("--owner %q: want PATH=UID:GID", o)
		}
		own[strings.Trim(p, "/")] = owner{uid, gid}
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	var history []v1.History
	for _, dir := range layers {
		data, err := tarTree(dir, own, when)
		if err != nil {
			return err
		}
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(data)), nil
		}, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return err
		}
		img, err = mutate.AppendLayers(img, layer)
		if err != nil {
			return err
		}
		history = append(history, v1.History{
			Created:   v1.Time{Time: when},
			CreatedBy: "oci-image --layer " + filepath.Base(dir),
		})
	}

	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = v1.Time{Time: when}
	cf.History = history
	cf.Config.User = *user
	cf.Config.WorkingDir = *workdir
	cf.Config.Env = env
	cf.Config.Entrypoint = entrypoint
	if len(expose) > 0 {
		cf.Config.ExposedPorts = map[string]struct{}{}
		for _, p := range expose {
			cf.Config.ExposedPorts[p] = struct{}{}
		}
	}
	if len(labels) > 0 {
		cf.Config.Labels = map[string]string{}
		for _, l := range labels {
			k, v, ok := strings.Cut(l, "=")
			if !ok {
				return fmt.Errorf("--label %q: want K=V", l)
			}
			cf.Config.Labels[k] = v
		}
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return err
	}
	return writeArchive(img, *name, *out, when)
}

// tarTree is a reproducible tar of dir's tree (paths relative to dir).
func tarTree(dir string, own map[string]owner, when time.Time) ([]byte, error) {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		fi, err := os.Lstat(p)
		if err != nil {
			return nil, err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return nil, err
			}
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return nil, err
		}
		h.Name = rel
		if fi.IsDir() {
			h.Name += "/"
		}
		o := own[rel]
		h.Uid, h.Gid, h.Uname, h.Gname = o.uid, o.gid, "", ""
		h.ModTime, h.AccessTime, h.ChangeTime = when, time.Time{}, time.Time{}
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return nil, err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			if err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeArchive writes the image as an OCI layout and tars that layout into
// out. The index names the image twice: the OCI ref name (the tag alone, as
// the spec has it) and containerd's own annotation (the full reference), which
// `ctr images import` uses as the image name.
func writeArchive(img v1.Image, name, out string, when time.Time) error {
	tmp, err := os.MkdirTemp(filepath.Dir(out), ".oci-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return err
	}
	tag := name
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		tag = name[i+1:]
	}
	err = p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag,
		"io.containerd.image.name":          name,
	}))
	if err != nil {
		return err
	}
	data, err := tarTree(tmp, nil, when)
	if err != nil {
		return err
	}
	if err := os.WriteFile(out+".tmp", data, 0o644); err != nil {
		return err
	}
	return os.Rename(out+".tmp", out)
}

// printConfig reads the config blob of the one image of an archive.
func printConfig(args []string) error {
	if len(args) != 1 {
		return errors.New("usage: oci-image config ARCHIVE")
	}
	files, err := readTar(args[0])
	if err != nil {
		return err
	}
	var index v1.IndexManifest
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		return fmt.Errorf("index.json: %w", err)
	}
	if len(index.Manifests) != 1 {
		return fmt.Errorf("index.json has %d manifests, want 1", len(index.Manifests))
	}
	var m v1.Manifest
	if err := json.Unmarshal(files[blob(index.Manifests[0].Digest)], &m); err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	cfg, ok := files[blob(m.Config.Digest)]
	if !ok {
		return errors.New("config blob missing")
	}
	_, err = os.Stdout.Write(append(cfg, '\n'))
	return err
}

func blob(d v1.Hash) string { return "blobs/" + d.Algorithm + "/" + d.Hex }

func readTar(path string) (map[string][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				return nil, err
			}
			files[strings.TrimPrefix(h.Name, "./")] = b
		}
	}
}
