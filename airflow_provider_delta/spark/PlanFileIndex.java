// A plan's files as Spark's file index, compiled by Janino on the driver (file_index.py).
// Janino's Java: no lambdas, no generics (raw Scala collections).
// Per-file constants are partition values: Spark fills them per file, as for a partitioned
// table, and trusts listFiles to apply the filters on them (it does not filter again).

import java.math.BigDecimal;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.function.IntFunction;

import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.BasePredicate;
import org.apache.spark.sql.catalyst.expressions.BoundReference;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.Predicate$;
import org.apache.spark.sql.execution.datasources.FileIndex;
import org.apache.spark.sql.execution.datasources.PartitionDirectory;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

public class PlanFileIndex implements FileIndex {
    private static final long BLOCK_SIZE = 32L << 20;

    private final scala.collection.immutable.Seq roots;
    private final FileStatus[] files;
    private final StructType constantSchema;
    private final PartitionDirectory[] directories;
    private long bytes;

    /** The files named in folder's file "paths" (URIs as Spark spells them, UTF-8, one after
     *  another, each starting at its offset in "offsets", which ends with the end of the last),
     *  of the sizes in "sizes", read below root; each file's modification time is its position
     *  in "positions" (milliseconds: rows name their file by it). All little-endian int64s.
     *  With fields in constantSchema, "groups" gives each file's row of constants (rows). */
    public PlanFileIndex(String root, String folder, StructType constantSchema) throws Exception {
        roots = asSeq(new Path(root));
        this.constantSchema = constantSchema;
        final byte[] text = readFile(folder, "paths");
        final long[] sizes = longs(folder, "sizes");
        final long[] positions = longs(folder, "positions");
        final long[] offsets = longs(folder, "offsets");
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
        directories = constantSchema.fields().length == 0
            ? new PartitionDirectory[] {PartitionDirectory.apply(InternalRow.empty(), files)}
            : grouped(files, longs(folder, "groups"), rows(folder, constantSchema.fields()));
    }

    /** Each group's constants, a value per field, from folder's files "numbers" (an int64 per
     *  value: integers, days, microseconds, a double's bits), "text" and "ends" (bytes per
     *  value, as paths and offsets: strings, binaries, decimals) and "nulls" (a byte per value),
     *  a group's values one after another. */
    private static InternalRow[] rows(String folder, StructField[] fields) throws Exception {
        long[] numbers = longs(folder, "numbers");
        long[] ends = longs(folder, "ends");
        byte[] text = readFile(folder, "text");
        byte[] nulls = readFile(folder, "nulls");
        InternalRow[] rows = new InternalRow[nulls.length / fields.length];
        for (int g = 0; g < rows.length; g++) {
            Object[] values = new Object[fields.length];
            for (int f = 0; f < fields.length; f++) {
                int i = g * fields.length + f;
                if (nulls[i] == 0) {
                    values[f] = value(fields[f].dataType(), numbers[i],
                                      Arrays.copyOfRange(text, (int) ends[i], (int) ends[i + 1]));
                }
            }
            rows[g] = new GenericInternalRow(values);
        }
        return rows;
    }

    /** A value as Spark holds it inside a row (file_index.py writes only these types). */
    private static Object value(DataType type, long number, byte[] bytes) {
        if (type instanceof StringType) {
            return UTF8String.fromBytes(bytes);
        }
        if (type instanceof BinaryType) {
            return bytes;
        }
        if (type instanceof DecimalType) {
            DecimalType decimal = (DecimalType) type;
            return Decimal.apply(new BigDecimal(new String(bytes, StandardCharsets.UTF_8)),
                                 decimal.precision(), decimal.scale());
        }
        if (type instanceof IntegerType || type instanceof DateType) {
            return Integer.valueOf((int) number);
        }
        if (type instanceof ShortType) {
            return Short.valueOf((short) number);
        }
        if (type instanceof ByteType) {
            return Byte.valueOf((byte) number);
        }
        if (type instanceof BooleanType) {
            return Boolean.valueOf(number != 0);
        }
        if (type instanceof DoubleType) {
            return Double.valueOf(Double.longBitsToDouble(number));
        }
        if (type instanceof FloatType) {
            return Float.valueOf((float) Double.longBitsToDouble(number));
        }
        return Long.valueOf(number);  // long, timestamp, timestamp_ntz
    }

    /** One directory per entry of constants that has files, the files in their order. */
    private static PartitionDirectory[] grouped(FileStatus[] files, long[] groups,
                                                InternalRow[] constants) {
        int[] counts = new int[constants.length];
        for (int i = 0; i < groups.length; i++) {
            counts[(int) groups[i]]++;
        }
        FileStatus[][] members = new FileStatus[constants.length][];
        ArrayList kept = new ArrayList();
        for (int g = 0; g < constants.length; g++) {
            members[g] = new FileStatus[counts[g]];
            counts[g] = 0;
        }
        for (int i = 0; i < groups.length; i++) {
            int g = (int) groups[i];
            members[g][counts[g]++] = files[i];
        }
        for (int g = 0; g < constants.length; g++) {
            if (members[g].length > 0) {
                kept.add(PartitionDirectory.apply(constants[g], members[g]));
            }
        }
        return (PartitionDirectory[]) kept.toArray(new PartitionDirectory[0]);
    }

    private static byte[] readFile(String folder, String name) throws Exception {
        return Files.readAllBytes(new java.io.File(folder, name).toPath());
    }

    private static long[] longs(String folder, String name) throws Exception {
        byte[] bytes = readFile(folder, name);
        long[] values = new long[bytes.length / 8];
        ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN).asLongBuffer().get(values);
        return values;
    }

    private static scala.collection.immutable.Seq asSeq(Object element) {
        return asScalaList(Collections.singletonList(element));
    }

    public scala.collection.immutable.Seq rootPaths() {
        return roots;
    }

    public scala.collection.immutable.Seq listFiles(scala.collection.immutable.Seq partitionFilters,
                                                    scala.collection.immutable.Seq dataFilters) {
        if (partitionFilters.isEmpty()) {
            return asScalaList(Arrays.asList(directories));
        }
        BasePredicate test = Predicate$.MODULE$.createInterpreted(bound(partitionFilters));
        ArrayList kept = new ArrayList();
        for (int i = 0; i < directories.length; i++) {
            if (test.eval(directories[i].values())) {
                kept.add(directories[i]);
            }
        }
        return asScalaList(kept);
    }

    /** The filters (on constants only, as Spark hands them over) as one predicate over a
     *  directory's values, each column bound by its name to its place in them. */
    private Expression bound(scala.collection.immutable.Seq filters) {
        final StructType schema = constantSchema;
        scala.PartialFunction byName = new scala.runtime.AbstractPartialFunction() {
            public boolean isDefinedAt(Object node) {
                return node instanceof AttributeReference;
            }

            public Object apply(Object node) {
                int index = schema.fieldIndex(((AttributeReference) node).name());
                return new BoundReference(index, schema.fields()[index].dataType(), true);
            }
        };
        Expression all = null;
        scala.collection.Iterator each = filters.iterator();
        while (each.hasNext()) {
            Expression one = (Expression) ((Expression) each.next()).transform(byName);
            all = all == null ? one : new And(all, one);
        }
        return all;
    }

    private static scala.collection.immutable.Seq asScalaList(java.util.List elements) {
        return scala.jdk.javaapi.CollectionConverters.asScala(elements).toList();
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
        return constantSchema;
    }

    public String toString() {
        return "PlanFileIndex(" + files.length + " files)";
    }
}
