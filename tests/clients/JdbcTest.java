// Weir pgjdbc client test, a single-file program:
//
//   java -cp /usr/share/java/postgresql.jar tests/clients/JdbcTest.java PORT [HOST]
//
// Checks DatabaseMetaData (getTables, getColumns, getPrimaryKeys, product name),
// PreparedStatement queries and updates with parameters of several types (pgjdbc
// switches to server-side prepared statements after a few executions), batches,
// transactions and SQLSTATEs. Prints one line per check and ends with
// "N passed, M failed"; exits 1 if anything failed.

import java.math.BigDecimal;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.Date;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Timestamp;
import java.sql.Types;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.Properties;

public class JdbcTest {
    interface Check {
        void run() throws Exception;
    }

    static int passed = 0;
    static int failed = 0;
    static String url;
    static Properties props;
    static Connection shared;

    /** The shared connection, reopened if the server dropped it, so one crashed
     *  session fails one check instead of every later one. */
    static Connection conn() throws SQLException {
        if (shared == null || shared.isClosed()) {
            shared = DriverManager.getConnection(url, props);
        }
        return shared;
    }

    /** Known server gaps (strict expected failures): a check listed here that
     *  fails prints `gap  name: reason` and does not count as failed; a listed
     *  check that passes counts as a failure, so the entry must be removed once
     *  the gap is fixed. */
    static final java.util.Map<String, String> KNOWN_GAPS = java.util.Map.of();
    static int gaps = 0;

    static void check(String name, Check body) {
        try {
            body.run();
        } catch (Throwable t) {
            if (KNOWN_GAPS.containsKey(name)) {
                gaps++;
                System.out.println("gap  " + name + ": " + KNOWN_GAPS.get(name));
                return;
            }
            failed++;
            System.out.println("FAIL " + name + ": " + t);
            if (!(t instanceof AssertionError)) {
                t.printStackTrace(System.out);
            }
            return;
        }
        if (KNOWN_GAPS.containsKey(name)) {
            failed++;
            System.out.println("FAIL " + name + ": known gap now passes: remove it from KNOWN_GAPS ("
                + KNOWN_GAPS.get(name) + ")");
        } else {
            passed++;
            System.out.println("ok   " + name);
        }
    }

    static void expectEq(Object actual, Object expected, String what) {
        if (!Objects.equals(actual, expected)) {
            throw new AssertionError(what + ": expected " + expected + ", got " + actual);
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: java -cp postgresql.jar JdbcTest.java PORT [HOST]");
            System.exit(2);
        }
        String host = args.length > 1 ? args[1] : "127.0.0.1";
        url = "jdbc:postgresql://" + host + ":" + args[0] + "/weir";
        props = new Properties();
        props.setProperty("user", "weir");
        props.setProperty("connectTimeout", "30");
        props.setProperty("socketTimeout", "120");
        // Use server-side prepared statements from the second execution on.
        props.setProperty("prepareThreshold", "2");

        {
            check("create the table", () -> {
                try (Statement st = conn().createStatement()) {
                    st.execute("DROP TABLE IF EXISTS jdbc_orders");
                    st.execute("CREATE TABLE jdbc_orders (id bigint PRIMARY KEY, customer text NOT NULL, "
                            + "amount numeric(10,2), placed date, seen timestamp, code varchar(8), paid boolean)");
                }
            });

            check("metadata names the product", () -> {
                DatabaseMetaData md = conn().getMetaData();
                expectEq(md.getDatabaseProductName(), "PostgreSQL", "getDatabaseProductName");
                if (md.getDatabaseMajorVersion() < 10) {
                    throw new AssertionError("major version " + md.getDatabaseMajorVersion());
                }
            });

            check("getTables finds the table", () -> {
                DatabaseMetaData md = conn().getMetaData();
                List<String> found = new ArrayList<>();
                try (ResultSet rs = md.getTables(null, "public", "jdbc_%", new String[] {"TABLE"})) {
                    while (rs.next()) {
                        found.add(rs.getString("TABLE_SCHEM") + "." + rs.getString("TABLE_NAME") + ":" + rs.getString("TABLE_TYPE"));
                    }
                }
                expectEq(found, List.of("public.jdbc_orders:TABLE"), "getTables(public, jdbc_%)");
            });

            check("getColumns describes every column", () -> {
                DatabaseMetaData md = conn().getMetaData();
                List<String> cols = new ArrayList<>();
                try (ResultSet rs = md.getColumns(null, "public", "jdbc_orders", null)) {
                    while (rs.next()) {
                        cols.add(rs.getInt("ORDINAL_POSITION") + " " + rs.getString("COLUMN_NAME") + " "
                                + rs.getString("TYPE_NAME") + " " + rs.getInt("DATA_TYPE") + " "
                                + rs.getString("IS_NULLABLE"));
                    }
                }
                expectEq(cols, List.of(
                        "1 id int8 " + Types.BIGINT + " NO",
                        "2 customer text " + Types.VARCHAR + " NO",
                        "3 amount numeric " + Types.NUMERIC + " YES",
                        "4 placed date " + Types.DATE + " YES",
                        "5 seen timestamp " + Types.TIMESTAMP + " YES",
                        "6 code varchar " + Types.VARCHAR + " YES",
                        "7 paid bool " + Types.BIT + " YES"), "getColumns(jdbc_orders)");
                try (ResultSet rs = md.getColumns(null, "public", "jdbc_orders", "amount")) {
                    if (!rs.next()) {
                        throw new AssertionError("no row for column amount");
                    }
                    expectEq(rs.getInt("COLUMN_SIZE"), 10, "precision of amount");
                    expectEq(rs.getInt("DECIMAL_DIGITS"), 2, "scale of amount");
                }
            });

            check("getPrimaryKeys names the key", () -> {
                List<String> keys = new ArrayList<>();
                try (ResultSet rs = conn().getMetaData().getPrimaryKeys(null, "public", "jdbc_orders")) {
                    while (rs.next()) {
                        keys.add(rs.getString("COLUMN_NAME"));
                    }
                }
                expectEq(keys, List.of("id"), "getPrimaryKeys(jdbc_orders)");
            });

            check("PreparedStatement inserts with parameters", () -> {
                try (PreparedStatement ps = conn().prepareStatement(
                        "INSERT INTO jdbc_orders (id, customer, amount, placed, seen, code, paid) VALUES (?, ?, ?, ?, ?, ?, ?)")) {
                    for (int i = 1; i <= 5; i++) {
                        ps.setLong(1, i);
                        ps.setString(2, "customer " + i);
                        ps.setBigDecimal(3, new BigDecimal(i + ".25"));
                        ps.setDate(4, Date.valueOf("2024-05-0" + i));
                        ps.setTimestamp(5, Timestamp.valueOf("2024-05-0" + i + " 10:30:00.5"));
                        if (i == 5) {
                            ps.setNull(6, Types.VARCHAR);
                        } else {
                            ps.setString(6, "C" + i);
                        }
                        ps.setBoolean(7, i % 2 == 0);
                        expectEq(ps.executeUpdate(), 1, "executeUpdate count for row " + i);
                    }
                }
            });

            check("PreparedStatement queries with parameters", () -> {
                try (PreparedStatement ps = conn().prepareStatement(
                        "SELECT id, customer, amount, placed, seen, code, paid FROM jdbc_orders WHERE amount >= ? AND customer <> ? ORDER BY id")) {
                    // Several executions: the later ones use a named server-side statement.
                    for (int round = 0; round < 4; round++) {
                        ps.setBigDecimal(1, new BigDecimal("3.00"));
                        ps.setString(2, "customer 4");
                        List<String> rows = new ArrayList<>();
                        try (ResultSet rs = ps.executeQuery()) {
                            while (rs.next()) {
                                rows.add(rs.getLong(1) + "|" + rs.getString(2) + "|" + rs.getBigDecimal(3) + "|"
                                        + rs.getDate(4) + "|" + rs.getTimestamp(5) + "|" + rs.getString(6) + "|"
                                        + rs.getBoolean(7));
                            }
                        }
                        expectEq(rows, List.of(
                                "3|customer 3|3.25|2024-05-03|2024-05-03 10:30:00.5|C3|false",
                                "5|customer 5|5.25|2024-05-05|2024-05-05 10:30:00.5|null|false"),
                                "rows of execution " + round);
                    }
                }
                try (PreparedStatement ps = conn().prepareStatement("SELECT count(*) FROM jdbc_orders WHERE paid = ?")) {
                    ps.setBoolean(1, true);
                    try (ResultSet rs = ps.executeQuery()) {
                        rs.next();
                        expectEq(rs.getLong(1), 2L, "count of paid orders");
                    }
                }
            });

            check("batch update and transaction", () -> {
                Connection conn = conn();
                conn.setAutoCommit(false);
                try {
                    try (PreparedStatement ps = conn.prepareStatement("UPDATE jdbc_orders SET paid = ? WHERE id = ?")) {
                        for (long id = 1; id <= 3; id++) {
                            ps.setBoolean(1, true);
                            ps.setLong(2, id);
                            ps.addBatch();
                        }
                        int[] counts = ps.executeBatch();
                        expectEq(counts.length, 3, "batch size");
                        for (int c : counts) {
                            expectEq(c, 1, "rows per batched UPDATE");
                        }
                    }
                    conn.rollback();
                    try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery("SELECT count(*) FROM jdbc_orders WHERE paid")) {
                        rs.next();
                        expectEq(rs.getLong(1), 2L, "paid orders after rollback");
                    }
                    try (Statement st = conn.createStatement()) {
                        st.executeUpdate("UPDATE jdbc_orders SET paid = true WHERE id = 1");
                    }
                    conn.commit();
                } finally {
                    if (!conn.isClosed()) {
                        conn.setAutoCommit(true);
                    }
                }
                try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery("SELECT count(*) FROM jdbc_orders WHERE paid")) {
                    rs.next();
                    expectEq(rs.getLong(1), 3L, "paid orders after commit");
                }
            });

            check("errors carry SQLSTATEs", () -> {
                String[][] cases = {
                    {"SELECT * FROM jdbc_no_such_table", "42P01"},
                    {"INSERT INTO jdbc_orders (id, customer) VALUES (1, 'dup')", "23505"},
                    {"SELECT 1/0", "22012"},
                };
                for (String[] c : cases) {
                    try (Statement st = conn().createStatement()) {
                        st.execute(c[0]);
                        throw new AssertionError(c[0] + " succeeded");
                    } catch (SQLException e) {
                        expectEq(e.getSQLState(), c[1], "SQLSTATE of " + c[0]);
                    }
                }
            });

            check("cleanup", () -> {
                try (Statement st = conn().createStatement()) {
                    st.execute("DROP TABLE jdbc_orders");
                }
            });
        }
        System.out.println(passed + " passed, " + failed + " failed, " + gaps + " known gaps");
        System.exit(failed == 0 ? 0 : 1);
    }
}
