package org.airflowconduit;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system (checksummed, as `file:` is by default) that sets a file's permission bits
 * through java.nio. Without Hadoop's native library, which pyspark does not ship, RawLocalFileSystem
 * starts a `chmod` process for every file and directory it creates: about eleven per micro-batch (the
 * offset and commit logs, each staged file and its checksum, the write's directories), each a fork and
 * exec of the driver's JVM on the batch's critical path. Modes with bits beyond rwx (sticky, setuid),
 * and file systems without POSIX permissions, still go to Hadoop's own code.
 */
public class LocalFiles extends LocalFileSystem {
    public LocalFiles() {
        super(new Raw());
    }

    public static class Raw extends RawLocalFileSystem {
        private static final PosixFilePermission[] BITS = {
            PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE,
            PosixFilePermission.OTHERS_READ, PosixFilePermission.GROUP_EXECUTE,
            PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
            PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE,
            PosixFilePermission.OWNER_READ,
        };

        public void setPermission(Path path, FsPermission permission) throws IOException {
            int mode = permission.toShort();
            if ((mode & ~0777) == 0) {
                Set<PosixFilePermission> bits = EnumSet.noneOf(PosixFilePermission.class);
                for (int i = 0; i < BITS.length; i++) {
                    if ((mode & (1 << i)) != 0) {
                        bits.add(BITS[i]);
                    }
                }
                try {
                    Files.setPosixFilePermissions(pathToFile(path).toPath(), bits);
                    return;
                } catch (UnsupportedOperationException notPosix) {
                    // Hadoop's own way below.
                }
            }
            super.setPermission(path, permission);
        }
    }
}
