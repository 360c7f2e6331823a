package imagebuild

// The image's layout. deploy/Dockerfile and deploy/kubernetes follow it;
// the tests check that they do.
const (
	// BinaryPath is holdfast's binary in the image.
	BinaryPath = "/usr/local/bin/holdfast"
	// ConfigPath is the configuration the image serves: the repository's
	// config.yaml, to be replaced by a mounted file.
	ConfigPath = "/etc/holdfast/config.yaml"
	// CACertsPath is the CA bundle (Go's crypto/x509 reads it on Linux),
	// for TLS to a backend whose certificate chains to a public root.
	CACertsPath = "/etc/ssl/certs/ca-certificates.crt"
	// UID and GID are the user the image runs as: distroless's nonroot.
	UID, GID = 65532, 65532
	// User is the image configuration's User.
	User = "65532:65532"
	// UserName names UID in the image's /etc/passwd, its home is HomeDir.
	UserName = "nonroot"
	HomeDir  = "/home/nonroot"
	// WorkingDir is where the entrypoint starts.
	WorkingDir = "/"
	// ClientPort and AdminPort are config.yaml's listen and admin.listen
	// ports, exposed by the image.
	ClientPort = 6033
	AdminPort  = 6034
	// Path is the image's PATH.
	Path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// Entrypoint and Cmd: `holdfast serve -config /etc/holdfast/config.yaml`.
// Arguments given to the image replace Cmd, so the same image runs
// `holdfast migrate -config /etc/holdfast/config.yaml` (a Kubernetes
// Job's args) or `holdfast version`.
var (
	Entrypoint = []string{BinaryPath}
	Cmd        = []string{"serve", "-config", ConfigPath}
)
