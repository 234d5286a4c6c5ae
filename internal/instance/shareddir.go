package instance

import (
	"os"

	"github.com/hoard-io/hoard/internal/disktier"
)

// sharedDir makes d, shared with its group (setgid, 0770) when group is
// set, as the disk tier makes its own directories (disktier.SharedDir):
// the application's instances on a node run as uids of their own and
// each makes its log beside the others'.
func sharedDir(d string, group bool) error {
	if !group {
		return os.MkdirAll(d, 0o700)
	}
	return disktier.SharedDir(d)
}
