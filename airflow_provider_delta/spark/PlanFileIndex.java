// A plan's files as Spark's file index, compiled by Janino on the driver (file_index.py).
// Janino's Java: no lambdas, no generics (raw Scala collections).

import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Arrays;
import java.util.Collections;
import java.util.function.IntFunction;

import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.execution.datasources.FileIndex;
import org.apache.spark.sql.execution.datasources.PartitionDirectory;
import org.apache.spark.sql.types.StructType;

public class PlanFileIndex implements FileIndex {
    private static final long BLOCK_SIZE = 32L << 20;

    private final scala.collection.immutable.Seq roots;
    private final FileStatus[] files;
    private long bytes;

    /** The files named in pathsFile (URIs as Spark spells them, UTF-8, one after another,
     *  each starting at its offset in offsetsFile, which ends with the end of the last), of the
     *  sizes in sizesFile, read below root; each file's modification time is its position in
     *  positionsFile (milliseconds: rows name their file by it). All little-endian int64s. */
    public PlanFileIndex(String root, String pathsFile, String offsetsFile, String sizesFile,
                         String positionsFile) throws Exception {
        roots = asSeq(new Path(root));
        final byte[] text = Files.readAllBytes(Paths.get(pathsFile));
        final long[] sizes = longs(sizesFile);
        final long[] positions = longs(positionsFile);
        final long[] offsets = longs(offsetsFile);
        files = new FileStatus[sizes.length];
        // a string, a URI parse and a Path per file, on every core
        Arrays.parallelSetAll(files, new IntFunction() {
            public Object apply(int i) {
                int start = (int) offsets[i];
                String path = new String(text, start, (int) offsets[i + 1] - start,
                                         StandardCharsets.UTF_8);
                try {
                    return new FileStatus(sizes[i], false, 1, BLOCK_SIZE, positions[i],
                                          new Path(new URI(path)));
                } catch (java.net.URISyntaxException e) {
                    throw new IllegalArgumentException(e);
                }
            }
        });
        for (int i = 0; i < sizes.length; i++) {
            bytes += sizes[i];
        }
    }

    private static long[] longs(String file) throws Exception {
        byte[] bytes = Files.readAllBytes(Paths.get(file));
        long[] values = new long[bytes.length / 8];
        ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN).asLongBuffer().get(values);
        return values;
    }

    private static scala.collection.immutable.Seq asSeq(Object element) {
        return scala.jdk.javaapi.CollectionConverters.asScala(
            Collections.singletonList(element)).toList();
    }

    public scala.collection.immutable.Seq rootPaths() {
        return roots;
    }

    public scala.collection.immutable.Seq listFiles(scala.collection.immutable.Seq partitionFilters,
                                                    scala.collection.immutable.Seq dataFilters) {
        return asSeq(PartitionDirectory.apply(InternalRow.empty(), files));
    }

    public String[] inputFiles() {
        String[] names = new String[files.length];
        for (int i = 0; i < files.length; i++) {
            names[i] = files[i].getPath().toString();
        }
        return names;
    }

    public void refresh() {
        // a plan's files are fixed
    }

    public long sizeInBytes() {
        return bytes;
    }

    public StructType partitionSchema() {
        return new StructType();
    }

    public String toString() {
        return "PlanFileIndex(" + files.length + " files)";
    }
}
